import { ArgumentError } from './errors.ts'
import { choiceHint, didYouMean } from './suggest.ts'

/** An options object, checked whole: anything but an object is refused, and so is any name in it not `known`. */
export function checkOptions(argument: string, what: string, options: unknown, known: ReadonlySet<string>): asserts options is object {
  // An array too is refused: its prototype's methods (keys, values) would pass for options given.
  if (typeof options !== 'object' || options === null || Array.isArray(options)) throw new ArgumentError(argument, options, `must be an object like { ${[...known].join(', ')} }`)
  rejectUnknown(what, options, known)
}

/** Where options that are known elsewhere go (`maxKeys`: 'a MemoryStore option: …'), by name: an unknown name's hint when it is no misspelling. */
export type Elsewhere = ReadonlyMap<string, string>

/** Unknown options are refused, not ignored: a misspelt option would silently do nothing. */
export function rejectUnknown(what: string, options: object, known: ReadonlySet<string>, elsewhere?: Elsewhere): void {
  // Names alone (no [name, value] pair per option): this runs on every call given options.
  for (const name of Object.keys(options)) {
    if (known.has(name)) continue
    const value: unknown = (options as Record<string, unknown>)[name]
    if (value !== undefined) throw new ArgumentError(name, value, `is not ${what} (known: ${[...known].join(', ')})`, didYouMean(name, known) ?? elsewhere?.get(name))
  }
}

/** An Elsewhere of groups of names, each group going to one place. */
export function elsewhere(...groups: ReadonlyArray<readonly [names: readonly string[], hint: string]>): Elsewhere {
  return new Map(groups.flatMap(([names, hint]) => names.map((name) => [name, hint] as const)))
}

/** A value that must be one of a few strings: refused by name, with the choices, and the one a misspelling meant. */
export function checkChoice<T extends string>(argument: string, value: unknown, choices: readonly T[]): asserts value is T {
  if ((choices as readonly unknown[]).includes(value)) return
  const quoted = choices.map((choice) => `'${choice}'`)
  throw new ArgumentError(argument, value, `must be ${quoted.slice(0, -1).join(', ')} or ${quoted.at(-1)}`, choiceHint(value, choices))
}

/** A flag that must be a real boolean: a string such as 'false' (from an environment variable) would be truthy. */
export function checkBoolean(name: string, value: unknown): void {
  if (value !== undefined && typeof value !== 'boolean') throw new ArgumentError(name, value, 'must be true or false')
}
