/**
 * `${ENV}` references in the gateway file's string values, substituted in the
 * parsed YAML document before the schema reads it.
 */
import { visit, isScalar, type Document } from 'yaml'

/**
 * `${NAME}` and `${NAME:-default}` in string values, replaced in place; a
 * default may hold references itself (`${A:-${B:-x}}`, as a shell and Compose
 * read it), and `$${` is a literal `${`. An unset variable without a default
 * is a problem, and so is a `${` that starts no reference: kept as written it
 * would become the value (a secret `${FALLBACK_SECRET}` anyone can read in the
 * file). Problems say where, never what: the string may be a secret.
 */
export function substituteEnv(doc: Document, env: NodeJS.ProcessEnv, report: (path: PropertyKey[], message: string, offset: number | undefined) => void, substituted: (path: PropertyKey[], raw: string) => void, takesOnlyText: (path: PropertyKey[]) => boolean = () => false): void {
  visit(doc, {
    Scalar(_key, node, ancestors) {
      if (typeof node.value !== 'string' || !node.value.includes('${')) return
      const path = pathOf([...ancestors, node])
      substituted(path, node.value)
      const expanded = expand(node.value, 0, env, 0)
      for (const problem of [...expanded.malformed, ...expanded.unset]) report(path, problem, node.range?.[0])
      const { text } = expanded
      // A value that is nothing but one reference may stand for a number or a boolean (`port: ${PORT}`),
      // except where only text goes (`password: ${REDIS_PASSWORD}`, a password of digits).
      if (expanded.whole && takesOnlyText(path)) node.value = text
      else if (expanded.whole && /^-?\d+$/.test(text)) node.value = Number(text)
      else if (expanded.whole && (text === 'true' || text === 'false')) node.value = text === 'true'
      else node.value = text
    },
  })
}

interface Expanded {
  text: string
  /** Where the text from `at` ended: its end, or the `}` closing the reference whose default it is. */
  end: number
  /** One reference and nothing else. */
  whole: boolean
  malformed: string[]
  /** Variables the text needed that are not set. */
  unset: string[]
}

/** Defaults within defaults, at most: deeper is no config anyone writes, and would exhaust the stack. */
const MAX_REFERENCE_DEPTH = 8
const VARIABLE_NAME = /[A-Za-z_][A-Za-z0-9_]*/y

function expand(source: string, at: number, env: NodeJS.ProcessEnv, depth: number): Expanded {
  const inDefault = depth > 0
  const expanded: Expanded = { text: '', end: source.length, whole: false, malformed: [], unset: [] }
  let i = at
  let references = 0
  let literal = false
  while (i < source.length) {
    if (inDefault && source[i] === '}') break
    if (source.startsWith('$${', i)) {
      expanded.text += '${'
      literal = true
      i += 3
      continue
    }
    if (!source.startsWith('${', i)) {
      expanded.text += source[i]
      literal = true
      i++
      continue
    }
    VARIABLE_NAME.lastIndex = i + 2
    const name = VARIABLE_NAME.exec(source)?.[0]
    const after = i + 2 + (name?.length ?? 0)
    if (name === undefined || (source[after] !== '}' && !source.startsWith(':-', after))) {
      expanded.malformed.push(`the \${ at character ${i + 1} starts no environment reference: write \${NAME} or \${NAME:-default}, or $\${ for a literal \${`)
      return expanded
    }
    let next = after + 1
    let value = env[name]
    if (value === undefined || value === '') {
      value = undefined
      if (source[after] === '}') expanded.unset.push(`environment variable ${name} is not set`)
    }
    if (source[after] !== '}') {
      if (depth === MAX_REFERENCE_DEPTH) {
        expanded.malformed.push(`the \${${name}:- at character ${i + 1} nests defaults more than ${MAX_REFERENCE_DEPTH} deep`)
        return expanded
      }
      const fallback = expand(source, after + 2, env, depth + 1)
      expanded.malformed.push(...fallback.malformed)
      if (fallback.malformed.length > 0) return expanded
      if (source[fallback.end] !== '}') {
        expanded.malformed.push(`the \${${name}:- at character ${i + 1} is not closed by a }`)
        return expanded
      }
      if (value === undefined) {
        value = fallback.text
        expanded.unset.push(...fallback.unset)
      }
      next = fallback.end + 1
    }
    expanded.text += value ?? ''
    references++
    i = next
  }
  expanded.end = i
  expanded.whole = references === 1 && !literal
  return expanded
}

/** The YAML path of a node from its ancestors (documents, maps, pairs, sequences). */
export function pathOf(ancestors: readonly unknown[]): PropertyKey[] {
  const path: PropertyKey[] = []
  ancestors.forEach((node, i) => {
    const next = ancestors[i + 1]
    if (node !== null && typeof node === 'object' && 'items' in node && Array.isArray(node.items) && next !== undefined) {
      const index = node.items.indexOf(next)
      if ((node as { constructor: { name: string } }).constructor.name === 'YAMLSeq') path.push(index)
    }
    if (node !== null && typeof node === 'object' && 'key' in node && 'value' in node) {
      const key = (node as { key: unknown }).key
      path.push(isScalar(key) ? String(key.value) : String(key))
    }
  })
  return path
}
