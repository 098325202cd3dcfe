/**
 * The gateway's YAML file: parsed with `yaml` (so every problem can name its
 * line), `${ENV}` references substituted in string values (config-env.ts),
 * checked by a zod schema (config-schema.ts), then by sluice's own policy
 * validation and the checks below. A wrong file is refused with
 * every problem listed, each as `path: problem (line N)`.
 */
import { createHash, X509Certificate } from 'node:crypto'
import { dirname, resolve } from 'node:path'
import { createSecureContext } from 'node:tls'
import { isUtf8 } from 'node:buffer'
import { deserialize, getHeapStatistics, serialize } from 'node:v8'
import { Worker } from 'node:worker_threads'
import { isAlias, isCollection, isMap, isPair, isScalar, isSeq, LineCounter, parseDocument, visit, type Document, type YAMLMap } from 'yaml'
import { REFUNDABLE } from '../algorithms/index.ts'
import { ArgumentError, maskCredentials, PolicyError, SluiceError } from '../core/errors.ts'
import { readFileBounded } from '../core/files.ts'
import { didYouMean, withHint } from '../core/suggest.ts'
import { letIoIn } from '../core/turn.ts'
import { limitOf, numberHint, resolvePolicies, resolvePolicy } from '../core/policy.ts'
import type { Policy, ResolvedPolicy } from '../core/types.ts'
import { clientIpResolver, everyAddressWarning, type ClientIpOptions } from '../http/client-ip.ts'
import { apiKey, jwtVerifier, type JwtVerifierOptions } from '../http/identity.ts'
import { bareHost, compileMatch, excludesAll, matchCovers, matchesMeet, NODE_METHODS, unknownMethods, type MatchOptions } from '../http/match.ts'
import { partitionKeyProblem } from '../http/headers.ts'
import { substituteEnv } from './config-env.ts'
import { configSchema, defaultMessage, fieldsAt, nameSchema, placesOf, policyName, quoteHint, takesOnlyText, SCG_FIELDS, show, type LimitConfig, type RawConfig } from './config-schema.ts'

/** A file that cannot be used: `problems` lists each, with its YAML path and line. */
export class ConfigError extends SluiceError {
  readonly problems: readonly string[]

  /** How many problems the file has; past MAX_PROBLEMS, `problems` lists the first ones and a line saying how many more. */
  readonly count: number

  constructor(file: string, problems: readonly string[], count = problems.length) {
    // A file given by mistake can have a problem per element (a list of a million numbers had a million): a log line or a
    // terminal takes the first ones, and the count says how many more there are.
    const listed = problems.length <= MAX_PROBLEMS || problems.length < count
      ? problems
      : [...problems.slice(0, MAX_PROBLEMS), `${count - MAX_PROBLEMS} more problems not listed: is it the right file?`]
    super('ERR_SLUICE_CONFIG', `${file}: ${count} problem${count === 1 ? '' : 's'}\n${listed.map((p) => `  - ${p}`).join('\n')}`)
    this.problems = listed
    this.count = count
  }
}

/** The most problems a ConfigError lists. */
const MAX_PROBLEMS = 100


/** A limit made ready for the HTTP layer: policies resolved and named, tiers spelled out. */
export interface ResolvedLimit {
  /** Unique across the file: `<route>.<limit>` or `global.<limit>`. */
  name: string
  /** undefined for a global limit. */
  route: string | undefined
  config: LimitConfig
  /** One entry per tier (`''` when the limit has no tiers). */
  policies: Map<string, Policy[]>
  cost: number
}

export interface GatewayConfig extends RawConfig {
  /** Values as the file writes them, by path (`server.listen`), where an environment reference was substituted. */
  written: ReadonlyMap<string, string>
  /** The file it came from, and a short hash of its contents (the config version). */
  file: string
  version: string
  /** The file and those it names (TLS, JWT key, API keys), absolute: what a change to reloads. */
  files: string[]
  limitsResolved: ResolvedLimit[]
  tls: { cert: Buffer; key: Buffer } | undefined
  jwtPublicKey: string | undefined
  /** `identity.apiKey.keys`, or the keys read from its keysFile; undefined: any value is a key. */
  apiKeys: string[] | undefined
  /** The tier each API key is listed with, where the keys name tiers (`tiers.from: apiKey`). */
  apiKeyTiers: Map<string, string> | undefined
}

/**
 * The parser's errors, one per line (a single slip in a flow collection makes
 * the parser report each token after it). In `{ }` and `[ ]`, `${NAME}`
 * unquoted is YAML syntax (`$` then a mapping), so a line with a reference says
 * how to write it.
 */
function yamlProblems(errors: ReadonlyArray<{ code: string; message: string; pos: [number, number] }>, text: string, lineOf: (offset: number) => number | undefined): string[] {
  const lines = text.split('\n')
  const seen = new Set<number | undefined>()
  const problems: string[] = []
  for (const error of errors) {
    const line = lineOf(error.pos[0])
    if (seen.has(line)) continue
    seen.add(line)
    const source = line === undefined ? '' : lines[line - 1] ?? ''
    const hint = /\$\{[A-Za-z_]/.test(source) && /[{[]/.test(source.slice(0, source.indexOf('${')))
      ? '; inside { } or [ ], quote a reference: "${NAME}"'
      : ''
    // The parser quotes the token it stopped at, which in a file given by mistake can be megabytes long.
    // Its words for a second document advise its own API (parseAllDocuments), not the user.
    const message = error.code === 'MULTIPLE_DOCS'
      ? 'a second document starts here (a --- line after content): a config is one document; remove the line, or the rest after it'
      : maskCredentials(error.message.split('\n')[0] as string)
    const shown = message.length > 160 ? `${message.slice(0, 120)}... (${message.length} characters)` : message
    problems.push(`YAML: ${shown} (line ${line ?? '?'})${hint}`)
  }
  if (problems.length <= MAX_YAML_PROBLEMS) return problems
  return [...problems.slice(0, MAX_YAML_PROBLEMS), `YAML: ${problems.length - MAX_YAML_PROBLEMS} more lines the parser cannot read: is it the right file?`]
}

/** YAML problems listed before the rest are only counted: past a few, the file is seldom a config. */
const MAX_YAML_PROBLEMS = 20

/** The largest file the config is read from or names (its API keys: 64 MiB is about a million of them). */
const MAX_FILE_BYTES = 64 * 1024 * 1024
const readBounded = (path: string) => readFileBounded(path, MAX_FILE_BYTES)

/** Reads, checks and resolves a config file; throws a ConfigError listing every problem. */
export async function loadConfig(file: string, env: NodeJS.ProcessEnv = process.env): Promise<GatewayConfig> {
  let bytes: Buffer
  try {
    bytes = readBounded(file)
  } catch (error) {
    throw new ConfigError(file, [`cannot read the file: ${(error as Error).message}`])
  }
  // YAML is text, and a config is UTF-8: a binary file (or UTF-16) is named as such, not parsed into noise.
  const notText = bytes.includes(0) ? 'it holds NUL bytes' : isUtf8(bytes) ? undefined : 'it holds bytes that are not UTF-8'
  if (notText !== undefined) throw new ConfigError(file, [`not a UTF-8 text file (${notText}): is it the right file?`])
  return parseConfig(bytes.toString('utf8'), file, env)
}

/**
 * loadConfig on a worker thread, as the gateway and the CLI read a config:
 * parsing and checking a file of thousands of routes takes a second or more,
 * which on a running gateway's own thread would hold every request it is
 * serving; and a file whose parsing runs out of memory (a large file given by
 * mistake) ends the worker, which the process can tell as a refusal, where on
 * this thread it would end the process. Where no worker can load its module
 * (run from TypeScript sources through a loader that does not reach workers),
 * the file is loaded on this thread.
 */
export async function loadConfigOffThread(file: string, env: NodeJS.ProcessEnv = process.env, options: WorkerLoadOptions = {}): Promise<GatewayConfig> {
  try {
    return await loadConfigInWorker(file, env, options)
  } catch (error) {
    if (error instanceof WorkerUnavailableError) return loadConfig(file, env)
    throw error
  }
}

/** The worker failed for want of something other than memory (it could not load its module, say): loading on the calling thread is the way left. */
export class WorkerUnavailableError extends Error {}

/** What the worker (config-worker.ts) is given, and what it sends back: a config in serialized parts (see configInParts). */
export interface ConfigWorkerData { file: string; env: NodeJS.ProcessEnv }
export type ConfigWorkerAnswer = { configParts: Uint8Array[] } | { problems: string[]; count: number } | { error: string }

/** The lists a config of thousands of routes is long in, sent in parts. */
const LONG_LISTS = ['routes', 'limitsResolved'] as const
/** Items of a long list per part: each about 2 ms to deserialize. */
const ITEMS_PER_PART = 500

/**
 * A config, serialized in parts, as the worker sends it. Deserialized in one
 * piece, the message of a config of 20,000 routes held the gateway's thread
 * for 0.2 s, during a reload the requests it was serving: in parts, they are
 * served between two (configFromParts).
 */
export function configInParts(config: GatewayConfig): Uint8Array[] {
  const parts = [serialize({ ...config, routes: [], limitsResolved: [] })]
  for (const list of LONG_LISTS) {
    for (let from = 0; from < config[list].length; from += ITEMS_PER_PART) parts.push(serialize({ list, items: config[list].slice(from, from + ITEMS_PER_PART) }))
  }
  return parts
}

/** The config of configInParts, deserialized a part at a time, I/O let in between two. */
export async function configFromParts(parts: readonly Uint8Array[]): Promise<GatewayConfig> {
  const [head, ...rest] = parts
  const config = deserialize(head as Uint8Array) as GatewayConfig
  for (const part of rest) {
    await letIoIn()
    const { list, items } = deserialize(part) as { list: (typeof LONG_LISTS)[number]; items: never[] }
    config[list].push(...items)
  }
  return config
}

/** The worker's module beside this one: compiled JavaScript in the package, TypeScript when run from the sources. */
const CONFIG_WORKER = new URL(import.meta.url.endsWith('.ts') ? './config-worker.ts' : './config-worker.js', import.meta.url)

/**
 * The heap a worker may fill reading a config: this thread's own limit, so
 * that a file this thread could have read (20,000 routes take more than 256
 * MB) is read there too. A worker without a limit of its own that runs out of
 * memory ends the process (V8's fatal error), not itself; with one, node ends
 * the worker alone.
 */
const workerHeapMb = () => Math.max(64, Math.floor(getHeapStatistics().heap_size_limit / 1024 / 1024))

export interface WorkerLoadOptions {
  /** The most heap the worker may fill (default: this thread's limit); past it the file is refused as too large. */
  heapMb?: number
  /** Ends the worker and rejects with the signal's reason (a gateway closing mid-reload). */
  signal?: AbortSignal
}

/**
 * loadConfig on a worker thread of its own (see loadConfigOffThread): a
 * ConfigError for the file's problems, one of its own when parsing it outgrows
 * `heapMb`; a WorkerUnavailableError when the worker failed for another reason.
 */
export async function loadConfigInWorker(file: string, env: NodeJS.ProcessEnv = process.env, options: WorkerLoadOptions = {}): Promise<GatewayConfig> {
  const { heapMb = workerHeapMb(), signal } = options
  signal?.throwIfAborted()
  const answer = await new Promise<ConfigWorkerAnswer>((resolve, reject) => {
    let worker: Worker
    try {
      worker = new Worker(CONFIG_WORKER, {
        workerData: { file, env: { ...env } } satisfies ConfigWorkerData,
        resourceLimits: { maxOldGenerationSizeMb: heapMb },
      })
    } catch (error) {
      reject(new WorkerUnavailableError((error as Error).message))
      return
    }
    const abort = () => {
      reject(signal?.reason)
      void worker.terminate()
    }
    signal?.addEventListener('abort', abort, { once: true })
    worker.once('message', (message: ConfigWorkerAnswer) => {
      resolve(message)
      void worker.terminate()
    })
    // Running out of memory is the file's doing. Any other failure is the worker's (its module cannot be loaded here:
    // TypeScript sources, a bundle; no thread could be started): the file is read on the calling thread instead.
    worker.once('error', (error: Error & { code?: string }) => reject(error.code === 'ERR_WORKER_OUT_OF_MEMORY'
      ? new ConfigError(file, [`too large to read: parsing it took more than the ${heapMb} MB of memory reading a config may use (is it the right file?)`])
      : new WorkerUnavailableError(error.message)))
    // After an answer or an error this changes nothing: the promise is settled.
    worker.once('exit', (code) => {
      signal?.removeEventListener('abort', abort)
      reject(new WorkerUnavailableError(`the worker stopped (exit code ${code}) before it answered`))
    })
  })
  if ('problems' in answer) throw new ConfigError(file, answer.problems, answer.count)
  if ('error' in answer) throw new Error(answer.error)
  return configFromParts(answer.configParts)
}

export async function parseConfig(text: string, file: string, env: NodeJS.ProcessEnv = process.env): Promise<GatewayConfig> {
  const lineCounter = new LineCounter()
  // `<<: *shared` merge keys, as docker-compose and CI files use them to share a block (YAML 1.1; off in 1.2 by default).
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true, merge: true })
  const lineOf = (offset: number | undefined) => (offset === undefined ? undefined : lineCounter.linePos(offset).line)
  if (doc.errors.length > 0) throw new ConfigError(file, yamlProblems(doc.errors, text, lineOf))
  // Each with its line: listed in the order of the file, whichever check found them.
  const problems: Array<{ line: number | undefined; text: string }> = []
  // Array sort is stable: problems of one line keep the order they were found in.
  const inFileOrder = () => [...problems].sort((a, b) => (a.line ?? 0) - (b.line ?? 0)).map(({ text }) => text)
  // A value whose variable is missing is reported once, for the variable, not again by the schema.
  const unset = new Set<string>()
  // The paths that have a problem (a variable unset, then the schema's issues): the rest is checked without them.
  const faults: Array<readonly PropertyKey[]> = []
  // Values as written where a reference was substituted: a problem found later (a port in use) can name the variable.
  const written = new Map<string, string>()
  substituteEnv(doc, env, (path, message, offset) => {
    unset.add(formatPath(path))
    faults.push([...path])
    const line = lineOf(offset)
    problems.push({ line, text: `${formatPath(path)}: ${message} (line ${line ?? '?'})` })
  }, (path, raw) => written.set(formatPath(path), raw), takesOnlyText)
  const unreadable = shapeProblems(doc).map(({ problem, offset }) => `YAML: ${problem} (line ${lineOf(offset) ?? '?'})`)
  if (unreadable.length > 0) throw new ConfigError(file, unreadable)
  let data: unknown
  try {
    const values = valuesHeld(doc)
    if (values > MAX_VALUES) {
      throw new ConfigError(file, [`YAML: the file holds more than ${MAX_VALUES.toLocaleString('en-US')} values, counting each alias (*name) as the values of its anchor: an alias bomb ("billion laughs"), or not a config`])
    }
    // Counted above, aliases are left to the count: yaml's own guard allows an anchor 100 uses, fewer than a large file makes.
    data = doc.toJS({ maxAliasCount: -1 }) ?? {}
  } catch (error) {
    if (error instanceof ConfigError) throw error
    throw new ConfigError(file, [`YAML: ${(error as Error).message}`])
  }
  // A file that is not a mapping of sections is the wrong file (a .env, a key, a list): say what it is, not what it holds,
  // which may be a secret bound for a CI log.
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    const what = Array.isArray(data) ? `a list of ${data.length} item${data.length === 1 ? '' : 's'}` : typeof data === 'string' ? `text (${data.length} characters, not shown)` : show(data)
    throw new ConfigError(file, [`(file): expected the config's sections (server, store, identity, limits, routes, ...), got ${what}: is it the right file?`])
  }
  // Top-level `x-` fields are the file's own, a place for anchors (`x-policy: &policy {...}`), as in docker-compose.
  for (const field of Object.keys(data)) if (field.startsWith('x-')) delete (data as Record<string, unknown>)[field]
  /** `shown`: the path as the problem names it, where the file's own words should not be repeated. */
  const report = (path: readonly PropertyKey[], message: string, shown = path) => {
    const { offset, via } = nodeWhere(doc, path)
    const line = lineOf(offset)
    // Brought by an alias: the anchor's line, where to change it, and the alias's, where the path is (the order the problems go in).
    const viaLine = via === undefined ? undefined : lineOf(via.offset)
    const where = line === undefined ? '' : viaLine === undefined || viaLine === line ? ` (line ${line})` : ` (line ${line}, through *${via?.anchor} at line ${viaLine})`
    problems.push({ line: viaLine ?? line, text: `${formatPath(shown)}: ${message}${where}` })
  }
  // Files the config names are found beside it, wherever the gateway was started from (systemd starts it in /).
  const beside = (path: string) => resolve(dirname(file), path)
  const parsed = configSchema.safeParse(data, { reportInput: true, error: defaultMessage })
  // An empty value an alias or a merge brought where a variable is unset: that variable's problem, said at its anchor.
  const emptiedByUnsetAnchor = (path: readonly PropertyKey[]) => unset.size > 0 && valueAt(data, path) === '' && nodeWhere(doc, path).via !== undefined
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      faults.push(issue.path)
      if (issue.code === 'unrecognized_keys') {
        for (const key of issue.keys) {
          if (!FIELD_LIKE.test(key)) {
            // No one names a field so: the wrong file (a password file, a key), whose lines may be secrets bound for a CI log.
            report([...issue.path, key], 'is not a known field: is it the right file?', [...issue.path, `<a name of ${key.length} characters, not shown>`])
            continue
          }
          const hint = didYouMean(key, fieldsAt(issue.path)) ?? peerFieldHint(key, issue.path) ?? misplacedHint(key, issue.path)
          report([...issue.path, key], withHint('is not a known field', hint))
        }
      } else if (!unset.has(formatPath(issue.path)) && !emptiedByUnsetAnchor(issue.path)) {
        // A value that is one of the choices misspelt (`draft10`, `queued`, `inflight`): say which.
        const field = String(issue.path.at(-1) ?? '')
        const hint = typeof issue.input === 'string' ? didYouMean(issue.input, choicesOf(issue)) ?? (takesOnlyText(issue.path) ? undefined : numberHint(field, issue.input)) : quoteHint(issue.path, issue.input)
        report(issue.path, withHint(issue.message, hint))
      }
    }
  }
  // Read from the file as written: a route with problems of its own, left out of the checks below, still has its name.
  const duplicateRoutes = duplicateRouteNames((data as Record<string, unknown>).routes, report)
  if (!parsed.success || problems.length > 0) {
    // The rest of the file is checked too, so that one run lists every problem, not those of one stage at a time.
    const rest = withoutFaults(data as Record<string, unknown>, faults, report)
    if (rest !== undefined) checkMeaning(rest.config, rest.reportFor, beside, rest.partial, duplicateRoutes)
    throw new ConfigError(file, inFileOrder())
  }
  const config = parsed.data
  const { limitsResolved, tls, jwtPublicKey, apiKeys, keyTiers, apiKeyTiers, watch } = checkMeaning(config, () => report, beside, false, duplicateRoutes)
  if (problems.length > 0) throw new ConfigError(file, inFileOrder())
  // Files the config names are part of it: a changed key file is a new version (and a reload takes it).
  const version = createHash('sha256').update(text).update(JSON.stringify([jwtPublicKey ?? null, apiKeys ?? null, keyTiers.map(({ key, tier }) => [key, tier]), tls?.cert.toString('base64') ?? null, tls?.key.toString('base64') ?? null])).digest('hex').slice(0, 12)
  const named = [config.server.tls?.cert, config.server.tls?.key, config.identity.jwt?.publicKeyFile, config.identity.apiKey?.keysFile]
  const files = [resolve(file), ...named.filter((path) => path !== undefined).map(beside)]
  return { ...config, admin: { ...config.admin, watch }, file, version, files, limitsResolved, tls, jwtPublicKey, apiKeys, apiKeyTiers, written }
}

/** What checkMeaning makes of a file besides its problems. */
interface Meaning {
  limitsResolved: ResolvedLimit[]
  tls: GatewayConfig['tls']
  jwtPublicKey: string | undefined
  apiKeys: string[] | undefined
  keyTiers: KeyTier[]
  apiKeyTiers: Map<string, string> | undefined
  watch: string[]
}

/**
 * The checks of a config the schema accepts: its policies, the files it
 * names, and what holds across its parts (names, references, routes that can
 * never match). `partial`: some routes or limits are left out (they have
 * problems of their own), so what only the whole file can show (that no route
 * takes a limit's requests, that no limit gives a tier) is not said.
 */
function checkMeaning(config: RawConfig, reportFor: ReportFor, beside: (path: string) => string, partial: boolean, duplicateRoutes: ReadonlySet<string>): Meaning {
  const limitsResolved = resolveLimits(config, reportFor(['routes', 'limits', 'tiers']), duplicateRoutes)
  let tls: GatewayConfig['tls']
  if (config.server.tls !== undefined) {
    const report = reportFor(['server'])
    const read = (field: 'cert' | 'key') => {
      try {
        return readBounded(beside((config.server.tls as { cert: string; key: string })[field]))
      } catch (error) {
        report(['server', 'tls', field], `cannot read: ${(error as Error).message}`)
        return Buffer.alloc(0)
      }
    }
    tls = { cert: read('cert'), key: read('key') }
    if (tls.cert.length > 0 && tls.key.length > 0) {
      try {
        // What the HTTPS listener would do with them: OpenSSL's own words alone ("key values mismatch") name no file.
        createSecureContext(tls)
      } catch (error) {
        report(['server', 'tls'], `the cert and key files cannot serve TLS: ${(error as Error).message} (a PEM certificate chain and the private key that belongs to it)`)
      }
    }
  }
  const report = reportFor(['identity'])
  let jwtPublicKey = config.identity.jwt?.publicKey
  if (config.identity.jwt?.publicKeyFile !== undefined) {
    try {
      jwtPublicKey = readBounded(beside(config.identity.jwt.publicKeyFile)).toString('utf8')
    } catch (error) {
      report(['identity', 'jwt', 'publicKeyFile'], `cannot read: ${(error as Error).message}`)
    }
  }
  let apiKeys: string[] | undefined
  // Each key's tier, where the keys name them (tiers.from: apiKey), and where it was written.
  const keyTiers: KeyTier[] = []
  const inlineKeys = config.identity.apiKey?.keys
  if (inlineKeys !== undefined) apiKeys = inlineKeys.map((entry, i) => keyOfEntry(entry, ['identity', 'apiKey', 'keys', i], undefined, keyTiers, report))
  const keysFile = config.identity.apiKey?.keysFile
  if (keysFile !== undefined) {
    try {
      const listed: string[] = []
      readBounded(beside(keysFile)).toString('utf8').split(/\r?\n/).forEach((text, i) => {
        const line = text.trim()
        if (line !== '' && !line.startsWith('#')) listed.push(keyOfEntry(line, ['identity', 'apiKey', 'keysFile'], `${keysFile}:${i + 1}`, keyTiers, report))
      })
      if (listed.length === 0) report(['identity', 'apiKey', 'keysFile'], `lists no key (${keysFile}): every request would fall through to the next resolver`)
      else apiKeys = listed
    } catch (error) {
      report(['identity', 'apiKey', 'keysFile'], `cannot read: ${(error as Error).message}`)
    }
  }
  const apiKeyTiers = checkKeyTiers(config, limitsResolved, keyTiers, reportFor(['tiers', 'identity', 'routes', 'limits']), partial)
  checkReferences(config, reportFor(['identity', 'tiers', 'routes', 'limits']))
  checkServer(config, reportFor(['server', 'admin', 'headers', 'routes']))
  checkStoreHolds(config, limitsResolved, reportFor(['store', 'tiers', 'routes', 'limits']))
  const watch = watchedKeys(config, apiKeys, reportFor(['admin', 'identity']))
  checkCompiles(config, jwtPublicKey, apiKeys, reportFor)
  checkReachable(config, reportFor(['routes', 'limits', 'caseSensitive']), partial)
  return { limitsResolved, tls, jwtPublicKey, apiKeys, keyTiers, apiKeyTiers, watch }
}

/**
 * The file as the checks can still read it where some of it is wrong
 * (`faults`, the paths of its problems): without the routes and global limits
 * that have problems, and with a default (or nothing) in place of any other
 * section that has some. Its `reportFor` names each problem where the file has
 * it, and keeps quiet for checks that read a section put in place.
 * Undefined where what is left is no config (every route is wrong).
 */
function withoutFaults(data: Record<string, unknown>, faults: readonly (readonly PropertyKey[])[], report: Report): { config: RawConfig; reportFor: ReportFor; partial: boolean } | undefined {
  const faultyItems = { routes: new Set<number>(), limits: new Set<number>() }
  const faultySections = new Set<string>()
  for (const [section, index] of faults) {
    if (section === undefined) continue
    if ((section === 'routes' || section === 'limits') && typeof index === 'number') faultyItems[section].add(index)
    else faultySections.add(String(section))
  }
  // For routes and global limits, the index in the file of each item kept.
  const kept = (section: 'routes' | 'limits'): number[] => {
    const items = data[section]
    return Array.isArray(items) ? [...items.keys()].filter((i) => !faultyItems[section].has(i)) : []
  }
  const routes = kept('routes')
  const limits = kept('limits')
  const rest: Record<string, unknown> = { ...data }
  for (const section of faultySections) delete rest[section]
  for (const [section, indices] of [['routes', routes], ['limits', limits]] as const) {
    if (Array.isArray(rest[section])) rest[section] = indices.map((i) => (data[section] as unknown[])[i])
  }
  const parsed = configSchema.safeParse(rest)
  if (!parsed.success) return undefined
  const inFile = (section: string, index: number) => (section === 'routes' ? routes : limits)[index] ?? index
  const mapped: Report = (path, message) => {
    const [section, index, ...below] = path
    const where = (section === 'routes' || section === 'limits') && typeof index === 'number' ? [section, inFile(section, index), ...below] : path
    // Messages name other routes and global limits by their paths too (`routes[0] comes first`); not a route's own limits[n].
    report(where, message.replace(/(^|[^.\w])(routes|limits)\[(\d+)\]/g, (_, before: string, named: string, n: string) => `${before}${named}[${inFile(named, Number(n))}]`))
  }
  const quiet: Report = () => {}
  return {
    config: parsed.data,
    reportFor: (sections) => (sections.some((section) => faultySections.has(section)) ? quiet : mapped),
    partial: routes.length < (Array.isArray(data.routes) ? data.routes.length : 0) || limits.length < (Array.isArray(data.limits) ? data.limits.length : 0),
  }
}

/** The route names the file gives more than one route (each named where it comes again); names that are no name are the schema's to report. */
function duplicateRouteNames(routes: unknown, report: Report): Set<string> {
  const seen = new Set<string>()
  const duplicates = new Set<string>()
  if (!Array.isArray(routes)) return duplicates
  routes.forEach((route: unknown, i) => {
    const name = typeof route === 'object' && route !== null ? (route as { name?: unknown }).name : undefined
    if (typeof name !== 'string' || !nameSchema.safeParse(name).success) return
    if (seen.has(name)) {
      report(['routes', i, 'name'], `${show(name)} names two routes`)
      duplicates.add(name)
    }
    seen.add(name)
  })
  return duplicates
}

/** An API key listed with its tier, and where: its YAML path, and for a keys file its file and line. */
interface KeyTier {
  key: string
  tier: string
  where: PropertyKey[]
  at: string | undefined
}

/** The key of a listed entry, `key` or `key tier` (trimmed), noting its tier. The entry is never shown: it holds a key. */
function keyOfEntry(entry: string, where: PropertyKey[], at: string | undefined, keyTiers: KeyTier[], report: Report): string {
  const [key, tier, ...more] = entry.trim().split(/\s+/) as [string, string | undefined, ...string[]]
  if (more.length > 0) report(where, `${at === undefined ? '' : `${at}: `}expected a key, or a key and its tier, separated by spaces; got ${more.length + 2} words`)
  if (tier !== undefined) keyTiers.push({ key, tier, where, at })
  return key
}

/**
 * The tiers API keys are listed with: read by `tiers.from: apiKey` only, and
 * each one a tier some limit gives policies for (a misspelt `prp` would
 * quietly be the default tier).
 */
function checkKeyTiers(config: RawConfig, limits: readonly ResolvedLimit[], keyTiers: readonly KeyTier[], report: Report, partial: boolean): Map<string, string> | undefined {
  const fromApiKey = config.tiers?.from === 'apiKey'
  if (fromApiKey && config.identity.apiKey === undefined) report(['tiers', 'from'], 'apiKey needs identity.apiKey, whose keys name their tiers')
  if (keyTiers.length === 0) return undefined
  if (!fromApiKey) {
    const { where, at } = keyTiers[0] as (typeof keyTiers)[number]
    report(where, `${at === undefined ? '' : `${at}: `}names a tier after its key, which only tiers.from: apiKey reads (tiers.from is ${config.tiers === undefined ? 'not set' : JSON.stringify(config.tiers.from)})`)
    return undefined
  }
  const named = new Set(limits.flatMap((limit) => [...limit.policies.keys()]).filter((tier) => tier !== ''))
  // A limit left out for its own problems may be the one that gives the tier.
  for (const { tier, where, at } of partial ? [] : keyTiers) {
    // The key itself is never shown: it is a secret.
    if (!named.has(tier)) report(where, `${at === undefined ? '' : `${at}: `}the tier ${show(tier)} is one no limit gives policies for (their tiers: ${[...named].join(', ') || 'none'})`)
  }
  return new Map(keyTiers.map(({ key, tier }) => [key, tier]))
}

/**
 * An `ip:` key as the client IP resolver writes it (an IPv6 address as its
 * /ipv6Prefix network, a mapped IPv4 address as IPv4); undefined when it holds
 * no address. Keys of other kinds are returned as given.
 */
export function canonicalKey(key: string, ipv6Prefix?: number): string | undefined {
  if (!key.startsWith('ip:')) return key
  const resolve = clientIpResolver(ipv6Prefix === undefined ? {} : { ipv6Prefix })
  return resolve(key.slice(3).replace(/\/\d{1,3}$/, ''), () => undefined).key
}

/**
 * `admin.watch` as the keys the gateway makes: `ip:` ones normalized as the
 * client IP resolver writes them (an IPv6 address as its /ipv6Prefix network,
 * a mapped IPv4 as IPv4), so /status shows the quota the client spends. A key
 * of another kind would only ever show a full quota.
 */
function watchedKeys(config: RawConfig, apiKeys: readonly string[] | undefined, report: Report): string[] {
  return config.admin.watch.map((key, i) => {
    // A key no request can be given would show a full quota for ever.
    if (key.startsWith('user:') && key.length > 5) {
      if (config.identity.jwt === undefined) report(['admin', 'watch', i], `${show(key)} is a JWT identity, and identity.jwt is not configured: no request is given it`)
      return key
    }
    if (key.startsWith('apikey:') && key.length > 7) {
      // Not quoted: an API key is a secret, and problems are logged.
      if (config.identity.apiKey === undefined) report(['admin', 'watch', i], 'is an API key identity (apikey:…), and identity.apiKey is not configured: no request is given it')
      else if (apiKeys !== undefined && !apiKeys.includes(key.slice(7))) report(['admin', 'watch', i], 'is an API key (apikey:…) that is not one of the listed keys: no request is given it')
      return key
    }
    if (key === 'anonymous' || key === 'everyone') return key
    if (key.startsWith('ip:')) {
      const normalized = canonicalKey(key, config.identity.clientIp?.ipv6Prefix)
      if (normalized !== undefined) return normalized
      report(['admin', 'watch', i], `${show(key)} holds no IP address (ip:203.0.113.7, ip:2001:db8::1)`)
      return key
    }
    report(['admin', 'watch', i], `${show(key)} is not a key the gateway makes: ip:<address>, apikey:<key>, user:<JWT claim>, anonymous or everyone`)
    return key
  })
}

type Report = (path: readonly PropertyKey[], message: string) => void

type Section = keyof RawConfig
/**
 * The report for a check that reads `sections`: where the file is checked
 * without one of them (see withoutFaults), a report that says nothing, so no
 * problem is made up from the default put in its place.
 */
type ReportFor = (sections: readonly Section[]) => Report

/**
 * What no config can be made of: an alias with no anchor before it (YAML
 * resolves an alias only to an earlier anchor), or inside
 * the node its anchor names (`a: &x [*x]`), whose value would contain itself;
 * a key that is a map or a list (`? [a]: b`), which no field is named.
 */
function shapeProblems(doc: Document): Array<{ problem: string; offset: number | undefined }> {
  const anchors = new Map<string, { range?: [number, number, number] | null | undefined }>()
  const problems: Array<{ problem: string; offset: number | undefined }> = []
  visit(doc, {
    Pair(_key, pair) {
      const key = pair.key as { range?: [number, number, number] | null } | null
      if (key !== null && typeof key === 'object' && !isScalar(key) && !isAlias(key)) problems.push({ problem: 'a key that is a map or a list; keys are names', offset: key.range?.[0] })
      // A tagged key such as `!!binary aGk=` is bytes, which JavaScript could only turn into a name by guessing (the yaml library warns on stderr).
      if (isScalar(key) && typeof key.value === 'object' && key.value !== null) problems.push({ problem: `a key that is ${key.value instanceof Uint8Array ? 'binary data (!!binary)' : 'not a plain value'}; keys are names`, offset: key.range?.[0] })
      // Where the schema reads a map of names (a policy, tiers, headers) it would drop this key unseen.
      if (isScalar(key) && key.value === '__proto__') problems.push({ problem: '__proto__ is not a name a config can use: JavaScript reserves it, so it would be dropped, not read', offset: key.range?.[0] })
    },
    Node(_key, node) {
      if (isAlias(node)) {
        const anchored = anchors.get(node.source)
        const at = node.range?.[0]
        if (anchored === undefined) problems.push({ problem: `*${node.source} refers to no anchor &${node.source} before it`, offset: at })
        else if (at !== undefined && anchored.range != null && at >= anchored.range[0] && at < anchored.range[2]) {
          problems.push({ problem: `*${node.source} is inside the &${node.source} it refers to, so the value would contain itself`, offset: at })
        }
      } else if (node.anchor !== undefined) {
        anchors.set(node.anchor, node)
      }
    },
  })
  return problems
}

/** The most values a file may hold, its aliases expanded: 5,000 routes written out hold about 150,000. */
const MAX_VALUES = 2_000_000

/**
 * The values (scalars, collections, keys) of the file as read, each alias
 * counted as the values of the node it names, and each of `<<: *name`'s
 * too, whose keys are copied in. Counted on the document, which holds each
 * anchor once, so an alias bomb is measured in time linear in the file,
 * never expanded. At most MAX_VALUES + 1: beyond that the count stops.
 */
function valuesHeld(doc: Document): number {
  const counted = new Map<unknown, number>()
  const count = (node: unknown): number => {
    if (node === null || typeof node !== 'object') return 0
    const known = counted.get(node)
    if (known !== undefined) return known
    let total: number
    if (isAlias(node)) total = count(node.resolve(doc))
    else if (isPair(node)) total = Math.min(MAX_VALUES + 1, count(node.key) + count(node.value))
    else if (isCollection(node)) {
      total = 1
      for (const item of node.items) {
        total = Math.min(MAX_VALUES + 1, total + count(item))
        if (total > MAX_VALUES) break
      }
    } else total = 1
    counted.set(node, total)
    return total
  }
  return count(doc.contents)
}

/** What a valid config may not mean to do: logged at start and reload, printed by check-config. */
export function configWarnings(config: GatewayConfig, now = Date.now()): string[] {
  const warnings: string[] = []
  if (config.identity.apiKey !== undefined && config.apiKeys === undefined) {
    warnings.push('identity.apiKey has no keys or keysFile: any value a client sends is an API key with a quota of its own, so a client can make up a new key per request. List the keys, or key the limits that stop abuse by ip.')
  }
  const tierFrom = config.tiers?.from
  const trustProxy = config.identity.clientIp?.trustProxy
  const trustsEveryone = everyAddressWarning(trustProxy, 'identity.clientIp.trustProxy')
  if (trustsEveryone !== undefined) warnings.push(trustsEveryone)
  const behindProxy = trustProxy !== undefined && trustProxy !== false && trustProxy !== 0 && !(Array.isArray(trustProxy) && trustProxy.length === 0)
  if (tierFrom === 'apiKey' && config.identity.apiKey !== undefined && config.apiKeyTiers === undefined) {
    warnings.push('tiers.from: apiKey, but no API key is listed with a tier (a key, a space, its tier: "k-1 pro"), so every request gets the default tier.')
  }
  if (tierFrom !== undefined && typeof tierFrom === 'object' && 'header' in tierFrom && !behindProxy) {
    warnings.push(`tiers.from.header: clients reach this gateway directly (identity.clientIp.trustProxy is not set), so any client can choose its tier by sending ${tierFrom.header}. Take the tier from a verified claim (tiers.from.jwtClaim), or set trustProxy for the proxy that writes the header.`)
  }
  const validity = config.tls === undefined ? undefined : certificateValidity(config.tls.cert, now)
  if (validity !== undefined) warnings.push(`server.tls.cert ${validity}`)
  return warnings
}

/**
 * When a PEM certificate (the first of a chain: the server's own) is valid,
 * in epoch ms, and whom it names; undefined where it cannot be read.
 */
export function certificateDates(pem: Buffer): { from: number; to: number; subject: string } | undefined {
  try {
    const certificate = new X509Certificate(pem)
    return { from: Date.parse(certificate.validFrom), to: Date.parse(certificate.validTo), subject: certificate.subject.replace(/\n/g, ', ') }
  } catch {
    return undefined
  }
}

/** Within this long of its end, a certificate is said to be ending. */
const CERTIFICATE_WARNING_MS = 14 * 86_400_000

/**
 * What to say of the served certificate's dates: clients refuse one that has
 * expired or is not yet valid, and nothing else the gateway does says why.
 * Undefined while it is valid for a while yet, or where it cannot be read.
 */
function certificateValidity(pem: Buffer, now: number): string | undefined {
  const dates = certificateDates(pem)
  if (dates === undefined) return undefined
  const { from, to, subject } = dates
  const day = (time: number) => new Date(time).toISOString().slice(0, 10)
  if (to <= now) return `expired on ${day(to)} (${subject}): clients refuse the connection. Renew it; saving the files reloads it.`
  if (from > now) return `is not valid until ${day(from)}: clients refuse the connection until then (a clock behind, on this host or theirs?).`
  if (to - now <= CERTIFICATE_WARNING_MS) return `expires on ${day(to)}, in ${Math.ceil((to - now) / 86_400_000)} day(s): renew it; saving the files reloads it.`
  return undefined
}

/**
 * Names every limit and policy, spells out Spring Cloud Gateway limits, and
 * checks what spans limits. `duplicateRoutes`: names of two routes, reported
 * already (see duplicateRouteNames), and not again for each of their limits.
 */
function resolveLimits(config: RawConfig, report: Report, duplicateRoutes: ReadonlySet<string>): ResolvedLimit[] {
  const resolved: ResolvedLimit[] = []
  const policyNames = new Map<string, string>()
  const limitNames = new Set<string>()
  const sources: Array<{ owner: string; route: string | undefined; limits: LimitConfig[]; path: PropertyKey[] }> = [
    { owner: 'global', route: undefined, limits: config.limits, path: ['limits'] },
    ...config.routes.map((route, i) => ({ owner: route.name, route: route.name, limits: route.limits, path: ['routes', i, 'limits'] })),
  ]
  for (const { owner, route, limits, path } of sources) {
    limits.forEach((limit, j) => {
      const where = [...path, j]
      const name = `${owner}.${limit.name ?? `limit-${j}`}`
      // Two routes of one name are reported once, above, not again for each of their limits.
      if (limitNames.has(name) && !duplicateRoutes.has(owner)) report([...where, 'name'], `${show(limit.name ?? `limit-${j}`)} names two limits of ${owner === 'global' ? 'the global limits' : `route ${show(owner)}`}`)
      limitNames.add(name)
      const byTier = new Map<string, { raw: unknown; path: PropertyKey[] }>()
      if (limit.tiers !== undefined) {
        for (const [tier, list] of Object.entries(limit.tiers)) byTier.set(tier, { raw: list, path: [...where, 'tiers', tier] })
        if (config.tiers === undefined) report([...where, 'tiers'], 'needs the top-level tiers section (where a request\'s tier comes from)')
        else if (!byTier.has(config.tiers.default)) report([...where, 'tiers'], `must give policies for the default tier ${show(config.tiers.default)}`)
      } else if (limit.policies !== undefined) {
        byTier.set('', { raw: limit.policies, path: [...where, 'policies'] })
      } else {
        // Spring Cloud Gateway's RequestRateLimiter is a token bucket refilled every second.
        byTier.set('', {
          raw: { algorithm: 'token-bucket', capacity: limit.burstCapacity, refillTokens: limit.replenishRate, refillIntervalMs: 1000 },
          path: where,
        })
      }
      const cost = limit.cost ?? limit.requestedTokens ?? 1
      const policies = new Map<string, Policy[]>()
      for (const [tier, { raw, path: tierPath }] of byTier) {
        const list = (Array.isArray(raw) ? raw : [raw]) as Array<Record<string, unknown>>
        let checked: readonly ResolvedPolicy[]
        let named: Policy[]
        try {
          // Unnamed policies are named after their limit, so equal policies on two routes never share state.
          named = list.map((p, k) => ({ ...p, name: typeof p.name === 'string' ? p.name : derivedName(owner, limit.name ?? `limit-${j}`, k, resolvePolicy(p).name) }) as Policy)
          checked = resolvePolicies(named)
        } catch (error) {
          // Spring Cloud Gateway's fields were checked one by one; as a token bucket they may still be too large together.
          const scgField = error instanceof PolicyError && limit.burstCapacity !== undefined ? SCG_FIELDS[error.field] : undefined
          if (scgField !== undefined) report([...where, scgField], `as the token bucket it stands for, ${(error as PolicyError).message}`)
          else report(tierPath, (error as Error).message)
          continue
        }
        checked.forEach((p, k) => {
          const other = policyNames.get(p.name)
          const policyPath = Array.isArray(raw) ? [...tierPath, k] : tierPath
          if (other !== undefined) report(policyPath, `policy name ${policyName(p.name)} is also used by ${other}; give each policy its own name (it keys the state and the headers)`)
          policyNames.set(p.name, formatPath(policyPath))
          if (cost > limitOf(p)) report([...where, limit.requestedTokens !== undefined ? 'requestedTokens' : 'cost'], `${cost} exceeds the limit ${limitOf(p)} of policy ${policyName(p.name)}, so every request would be refused`)
          if (limit.count === 'in-flight' && p.algorithm !== 'sliding-log') {
            report([...where, 'count'], `in-flight needs sliding-log policies (limit: requests in progress at once; windowMs: the longest one is counted, should its release be lost); ${policyName(p.name)} is ${p.algorithm}`)
          } else if (limit.count !== undefined && limit.count !== 'all' && !REFUNDABLE(p)) {
            report([...where, 'count'], `${limit.count} refunds the responses that do not count, which needs token-bucket, police leaky-bucket or sliding-log policies; ${policyName(p.name)} is ${p.algorithm}`)
          }
          if (limit.action === 'queue' && !['token-bucket', 'leaky-bucket', 'fixed-window'].includes(p.algorithm)) {
            report([...where, 'action'], `queue needs token-bucket, leaky-bucket or fixed-window policies; ${policyName(p.name)} is ${p.algorithm}`)
          }
        })
        policies.set(tier, named)
      }
      resolved.push({ name, route, config: limit, policies, cost })
    })
  }
  return resolved
}

/** `<route>.<policy>` (e.g. `api.token-bucket:100@10/1s`), shortened when that is over the 64 characters a name may have. */
function derivedName(owner: string, limit: string, index: number, policy: string): string {
  const full = `${owner}.${policy}`
  return full.length <= 64 ? full : `${owner}.${limit}.${index}`.slice(0, 64)
}

/**
 * Routes and limits that can never match: a route taken by an earlier one
 * (the first route that matches takes the request), and a route or limit
 * whose exclude patterns cover every path it names.
 */
function checkReachable(config: RawConfig, report: Report, partial: boolean): void {
  const excludesOwnPaths = (match: MatchOptions | undefined) => match !== undefined && excludesAll(match, [], config.caseSensitive)
  // A limit's own match narrows where it applies; one naming a method node refuses is reported above, not again here.
  const narrowsWithKnownMethods = (match: MatchOptions | undefined): match is MatchOptions => match !== undefined && unknownMethods(match).length === 0
  const knownMethods = (match: MatchOptions | undefined, path: PropertyKey[]) => {
    for (const method of match === undefined ? [] : unknownMethods(match)) {
      report([...path, 'match', 'method'], `${show(method)} is not a method the gateway can receive: node's HTTP parser answers 400 to all but ${[...NODE_METHODS].join(', ')}`)
    }
  }
  config.limits.forEach((limit, k) => knownMethods(limit.match, ['limits', k]))
  const coverers = earlierCoverers(config.caseSensitive)
  config.routes.forEach((route, j) => {
    knownMethods(route.match, ['routes', j])
    route.limits.forEach((limit, k) => knownMethods(limit.match, ['routes', j, 'limits', k]))
    if (excludesOwnPaths(route.match)) {
      report(['routes', j, 'match', 'exclude'], 'excludes every path the route names, so it can never match')
      return
    }
    const earlier = coverers(route.match).find((i) => matchCovers(config.routes[i]?.match ?? {}, route.match ?? {}, config.caseSensitive)) ?? -1
    coverers.add(route.match, j)
    if (earlier !== -1) {
      report(['routes', j, ...(route.match !== undefined ? ['match'] : [])], `can never match: routes[${earlier}] (${show(config.routes[earlier]?.name)}) comes first and takes every request this route would; move this route above it, or narrow that one`)
    }
    route.limits.forEach((limit, k) => {
      if (excludesOwnPaths(limit.match)) report(['routes', j, 'limits', k, 'match', 'exclude'], 'excludes every path the limit names, so it never applies')
      else if (narrowsWithKnownMethods(limit.match) && !matchesMeet(route.match ?? {}, limit.match, config.caseSensitive)) {
        report(['routes', j, 'limits', k, 'match'], `no request the route takes (${describeMatch(route.match)}) is one this limit names (${describeMatch(limit.match)}), so it never applies: a limit's match narrows its route's, with the whole path`)
      }
    })
    // stripPrefix strips from the prefix itself and the paths below it: `<prefix>/**`.
    const strip = route.stripPrefix
    if (strip !== undefined && strip !== '/' && !matchesMeet({ path: route.match?.path ?? '/**' }, { path: `${strip}/**` }, config.caseSensitive)) {
      report(['routes', j, 'stripPrefix'], `${show(strip)} begins no path the route matches (${describeMatch({ path: route.match?.path })}), so nothing would be stripped and the upstream would get every path whole`)
    }
  })
  config.limits.forEach((limit, k) => {
    if (excludesOwnPaths(limit.match)) report(['limits', k, 'match', 'exclude'], 'excludes every path the limit names, so it never applies')
    // A route left out for its own problems may be the one that takes them.
    else if (!partial && narrowsWithKnownMethods(limit.match) && config.routes.length > 0 && !config.routes.some((route) => matchesMeet(route.match ?? {}, limit.match as MatchOptions, config.caseSensitive))) {
      report(['limits', k, 'match'], `no route takes a request this limit names (${describeMatch(limit.match)}), so it never applies: requests no route takes are answered 404 unlimited`)
    }
  })
}

/**
 * The routes added so far that may cover a match (see matchCovers), in order.
 * A pattern covers another only when it is `/**`, the same pattern, or a
 * literal prefix of it with `/**` after (`/api/orders/**` covers
 * `/api/orders/7`); a host only when it is the same host or a `*.` wildcard
 * that it ends in, and a route with hosts covers only routes with hosts
 * (one without covers any). So each route is filed under its hosts and its patterns' prefixes,
 * and a route is checked against those filed under its first host or a
 * wildcard above it, with its first pattern or one of that pattern's
 * ancestors, not against every route before it.
 */
function earlierCoverers(caseSensitive: boolean): ((match: MatchOptions | undefined) => number[]) & { add(match: MatchOptions | undefined, index: number): void } {
  const patterns = (match: MatchOptions | undefined) => [match?.path ?? '/**'].flat().map((pattern) => (caseSensitive ? pattern : pattern.toLowerCase()))
  // '' stands for no host: a route without hosts covers any, and is covered only by another without.
  const hosts = (match: MatchOptions | undefined) => (match?.host === undefined ? [''] : [match.host].flat().map(bareHost))
  const filed = new Map<string, number[]>()
  const file = (key: string, index: number) => {
    const found = filed.get(key)
    if (found === undefined) filed.set(key, [index])
    else if (found[found.length - 1] !== index) found.push(index)
  }
  const coverers = (match: MatchOptions | undefined) => {
    // Every pattern and host of the route must be covered: those that may cover its first ones are enough to try.
    const first = patterns(match)[0] ?? '/**'
    const paths = [first]
    // Its ancestors: `/a/b` for `/a/b/c`, then `/a`, then '' (where `/**` is filed).
    for (let end = first.lastIndexOf('/'); ; end = first.lastIndexOf('/', end - 1)) {
      paths.push(first.slice(0, end))
      if (end <= 0) break
    }
    // Routes without hosts, the host itself, and the wildcards above it: `*.b.test` and `*.test` for a.b.test (or for `*.b.test`).
    const host = hosts(match)[0] ?? ''
    const names = host === '' ? [host] : ['', host]
    const labels = host.startsWith('*.') ? host.slice(2) : host
    for (let dot = labels.indexOf('.'); dot !== -1; dot = labels.indexOf('.', dot + 1)) names.push(`*.${labels.slice(dot + 1)}`)
    return [...new Set(names.flatMap((name) => paths.flatMap((path) => filed.get(`${name} ${path}`) ?? [])))].sort((a, b) => a - b)
  }
  coverers.add = (match: MatchOptions | undefined, index: number) => {
    for (const host of hosts(match)) {
      for (const pattern of patterns(match)) {
        const prefix = pattern.slice(0, -3)
        // `/**` is filed under '', the key every pattern looks up.
        file(`${host} ${pattern.endsWith('/**') && !prefix.includes('*') ? prefix : pattern}`, index)
      }
    }
  }
  return coverers
}

/** A match's paths and methods, as a problem quotes them. */
function describeMatch(match: MatchOptions | undefined): string {
  const paths = [match?.path ?? '/**'].flat().join(', ')
  return match?.method === undefined ? paths : `${[match.method].flat().join(', ')} ${paths}`
}

/** What only fails when the gateway starts, or behaves otherwise than written: two listeners on one port, timeouts that contradict. */
function checkServer(config: RawConfig, report: Report): void {
  const unsent = partitionKeyProblem(config.headers)
  if (unsent !== undefined) report(['headers', 'partitionKey'], unsent)
  // A route's style is the top-level one under its own, field by field; a partition key it inherits goes where its style has room.
  config.routes.forEach((route, i) => {
    const merged = route.headers?.partitionKey === true ? partitionKeyProblem({ ...config.headers, ...route.headers }) : undefined
    if (merged !== undefined) report(['routes', i, 'headers', 'partitionKey'], merged)
  })
  const server = config.server.listen
  const admin = config.admin.listen
  const anyAddress = (host: string) => host === '0.0.0.0' || host === '::'
  if (server.port !== 0 && admin.port === server.port && (admin.host === server.host || anyAddress(admin.host) || anyAddress(server.host))) {
    report(['admin', 'listen'], `is server.listen's port (${server.port}): give the admin listener one of its own`)
  }
  const { headersMs, requestMs } = config.server.timeouts
  if (headersMs > requestMs) {
    report(['server', 'timeouts', 'headersMs'], `${headersMs} exceeds requestMs (${requestMs}): the whole request, headers included, must arrive within requestMs`)
  }
}

/**
 * A memory store must hold one request's entries, one per policy it is decided
 * with (the global limits and its route's, the largest tier of each): fewer,
 * and it evicts a request's own state as it writes it, so nothing is refused.
 */
function checkStoreHolds(config: RawConfig, limits: readonly ResolvedLimit[], report: Report): void {
  if (config.store.type !== 'memory' || config.store.maxKeys === undefined) return
  const entries = (limit: ResolvedLimit) => Math.max(0, ...[...limit.policies.values()].map((policies) => policies.length))
  const global = limits.filter((limit) => limit.route === undefined).reduce((sum, limit) => sum + entries(limit), 0)
  const most = Math.max(global, ...config.routes.map((route) => global + limits.filter((limit) => limit.route === route.name).reduce((sum, limit) => sum + entries(limit), 0)))
  if (config.store.maxKeys < most) {
    report(['store', 'maxKeys'], `${config.store.maxKeys} is below the ${most} entries one client's request can take (one per policy it is decided with): each request would evict its own state and none would be refused`)
  }
}

function checkReferences(config: RawConfig, report: Report): void {
  const configured = new Set(['ip', 'everyone', ...(config.identity.jwt !== undefined ? ['jwt'] : []), ...(config.identity.apiKey !== undefined ? ['apiKey'] : [])])
  const check = (kinds: readonly string[] | undefined, path: PropertyKey[]) => {
    kinds?.forEach((kind, i) => {
      if (!configured.has(kind)) report([...path, i], `${show(kind)} is not configured under identity`)
      else if (kinds.indexOf(kind) < i) report([...path, i], `${show(kind)} is named twice`)
      // Every request has a client address, and everyone is every request: whatever comes after either is never tried.
      else if ((kind === 'ip' || kind === 'everyone') && i < kinds.length - 1) {
        report([...path, i], `${kind} identifies every request, so ${kinds.slice(i + 1).join(', ')} after it would never be tried: put ${kind} last`)
      }
    })
  }
  check(config.identity.order, ['identity', 'order'])
  config.limits.forEach((limit, j) => check(limit.key, ['limits', j, 'key']))
  config.routes.forEach((route, i) => route.limits.forEach((limit, j) => check(limit.key, ['routes', i, 'limits', j, 'key'])))
  if (config.tiers !== undefined && typeof config.tiers.from === 'object' && 'jwtClaim' in config.tiers.from && config.identity.jwt === undefined) {
    report(['tiers', 'from', 'jwtClaim'], 'needs identity.jwt to verify the token the claim comes from')
  }
}

/**
 * Builds what the gateway builds from the file (match predicates, the client
 * IP resolver, the JWT verifier), so anything they refuse is a listed problem
 * here, with its line, rather than a failed start or reload.
 */
function checkCompiles(config: RawConfig, jwtPublicKey: string | undefined, apiKeys: string[] | undefined, reportFor: ReportFor): void {
  const attempt = (where: PropertyKey[], build: () => unknown, fieldOf: (argument: string) => string = (argument) => argument) => {
    try {
      build()
    } catch (error) {
      if (!(error instanceof ArgumentError)) throw error
      // An ArgumentError's message starts with its argument, a dotted path below `where`; each build reads the section it is reported in.
      reportFor([where[0] as Section])([...where, ...fieldOf(error.argument).split('.')], error.message.slice(error.argument.length + 1))
    }
  }
  config.routes.forEach((route, i) => {
    if (route.match !== undefined) attempt(['routes', i], () => compileMatch(route.match ?? {}, 'match'))
    route.limits.forEach((limit, j) => {
      if (limit.match !== undefined) attempt(['routes', i, 'limits', j], () => compileMatch(limit.match ?? {}, 'match'))
    })
  })
  config.limits.forEach((limit, j) => {
    if (limit.match !== undefined) attempt(['limits', j], () => compileMatch(limit.match ?? {}, 'match'))
  })
  attempt(['identity', 'clientIp'], () => clientIpResolver(clientIpOptions(config)))
  const apiKeyHeader = config.identity.apiKey?.header
  if (apiKeyHeader !== undefined) attempt(['identity', 'apiKey'], () => apiKey(apiKeyHeader, apiKeys === undefined ? {} : { keys: apiKeys }))
  const jwt = jwtOptions(config, jwtPublicKey)
  const keyFile = config.identity.jwt?.publicKeyFile
  // A key file that could not be read is reported already; a key read from one is reported as the file.
  if (jwt !== undefined && (keyFile === undefined || jwtPublicKey !== undefined)) {
    attempt(['identity', 'jwt'], () => jwtVerifier(jwt), (argument) => (argument === 'publicKey' && keyFile !== undefined ? 'publicKeyFile' : argument))
  }
}

/** The client IP resolver's options, as the file gives them. */
export function clientIpOptions(config: RawConfig): ClientIpOptions {
  const clientIp = config.identity.clientIp
  return {
    ...(clientIp?.trustProxy !== undefined ? { trustProxy: clientIp.trustProxy } : {}),
    ...(clientIp?.ipv6Prefix !== undefined ? { ipv6Prefix: clientIp.ipv6Prefix } : {}),
    ...(clientIp?.header !== undefined ? { header: clientIp.header } : {}),
  }
}

/** The JWT verifier's options, as the file gives them (the public key read from its file), or undefined without `identity.jwt`. */
export function jwtOptions(config: RawConfig, publicKey: string | undefined): JwtVerifierOptions | undefined {
  const jwt = config.identity.jwt
  if (jwt === undefined) return undefined
  return {
    algorithms: jwt.algorithms,
    ...(jwt.secret !== undefined ? { secret: jwt.secret } : {}),
    ...(publicKey !== undefined ? { publicKey } : {}),
    ...(jwt.jwksUrl !== undefined ? { jwksUrl: jwt.jwksUrl } : {}),
    ...(jwt.issuer !== undefined ? { issuer: jwt.issuer } : {}),
    ...(jwt.audience !== undefined ? { audience: jwt.audience } : {}),
  }
}

/** The value at `path` in the data read from the file (a policy's issues carry none of their own). */
function valueAt(data: unknown, path: readonly PropertyKey[]): unknown {
  return path.reduce<unknown>((value, key) => (typeof value === 'object' && value !== null ? (value as Record<PropertyKey, unknown>)[key] : undefined), data)
}

/**
 * Where the value at `path` is written (the deepest node on it that exists: a
 * missing field points at its parent), following aliases and merges
 * (`<<: *policy`) to their anchors; and `via`, the first alias on the way, the
 * place the path itself is written (a route's `*policy`), with its anchor's name.
 */
function nodeWhere(doc: Document, path: readonly PropertyKey[]): { offset: number | undefined; via: { offset: number; anchor: string } | undefined } {
  let via: { offset: number; anchor: string } | undefined
  const start = (node: unknown) => (node as { range?: [number, number, number] } | undefined)?.range?.[0]
  // An alias is followed to its anchor's node; the first on the way is where the path is written.
  const followed = (node: unknown): unknown => {
    if (!isAlias(node)) return node
    const offset = start(node)
    if (via === undefined && offset !== undefined) via = { offset, anchor: node.source }
    return node.resolve(doc)
  }
  let node = followed(doc.contents)
  let offset = start(node)
  for (const part of path) {
    let child: unknown
    if (isSeq(node) && typeof part === 'number') child = node.get(part, true)
    else if (isMap(node)) {
      child = node.get(part, true)
      // Not a field of its own: the first merged anchor that has it (a map's own fields come before merged ones).
      for (const pair of child === undefined ? node.items : []) {
        if (!isScalar(pair.key) || pair.key.source !== '<<') continue
        const sources = isSeq(pair.value) ? pair.value.items : [pair.value]
        const source = sources.find((alias) => { const merged = isAlias(alias) ? alias.resolve(doc) : undefined; return isMap(merged) && merged.has(part) })
        if (source === undefined) continue
        child = (followed(source) as YAMLMap).get(part, true)
        break
      }
    }
    if (child === undefined) break
    node = followed(child)
    offset = start(node) ?? offset
  }
  return { offset, via }
}

/** What a field's name could be, misspelt or misplaced (`windowMS`, `rate_limit`, `x.y`); anything else is shown only by its length. */
const FIELD_LIKE = /^[A-Za-z_$][\w$.-]{0,63}$/

/** `routes[2].limits[0].capacity` */
export function formatPath(path: readonly PropertyKey[]): string {
  if (path.length === 0) return '(file)'
  return path.map((part, i) => (typeof part === 'number' ? `[${part}]` : `${i === 0 ? '' : '.'}${String(part)}`)).join('')
}

/** The strings a value could have been, where the schema lists them: an enum's, or those of a union's enums and literals. */
function choicesOf(issue: ZodIssueLike): string[] {
  if (issue.code === 'invalid_value') return (issue.values ?? []).filter((value): value is string => typeof value === 'string')
  if (issue.code === 'invalid_union') return (issue.errors ?? []).flat().flatMap(choicesOf)
  return []
}

interface ZodIssueLike {
  code: string
  values?: readonly unknown[]
  errors?: readonly (readonly ZodIssueLike[])[]
}

/** For a field known at another level of the config: where it goes (`admin is a field of the top level`). Undefined where it is known nowhere, or in too many places to point at one. */
function misplacedHint(field: string, path: readonly PropertyKey[]): string | undefined {
  const here = placeOf(path)
  const elsewhere = placesOf(field).filter((place) => place !== here)
  // The nearest places below this one first (`algorithm` in a limit goes in its policies), then anywhere.
  const below = elsewhere.filter((place) => here === '' || place.startsWith(`${here}.`) || place.startsWith(`${here}[]`))
  const nearest = below.filter((place) => depthOf(place) === Math.min(...below.map(depthOf)))
  const places = nearest.length > 0 && nearest.length <= 3 ? nearest : elsewhere
  if (places.length === 0 || places.length > 3) return undefined
  return `${field} is a field of ${places.map((place) => (place === '' ? 'the top level' : place)).join(' or ')}`
}

/** A path as placesOf names places: `routes[].limits[]`, `server.connections`. */
function placeOf(path: readonly PropertyKey[]): string {
  return path.map((part) => (typeof part === 'number' ? '[]' : `.${String(part)}`)).join('').replace(/^\./, '')
}

/** By place, fields as other gateways and proxies name them, and ours. */
const PEER_CONFIG_FIELDS: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  'routes[]': { uri: 'upstream', url: 'upstream', target: 'upstream', proxy_pass: 'upstream', backend: 'upstream', service: 'upstream' },
  'server.connections': { perIp: 'perClient', perAddress: 'perClient', perHost: 'perClient', limit_conn: 'perClient', maxConnections: 'max' },
}

/** `did you mean "upstream"?` for a field another gateway names so (Spring Cloud Gateway's `uri`, nginx's `proxy_pass`). */
function peerFieldHint(field: string, path: readonly PropertyKey[]): string | undefined {
  const names = PEER_CONFIG_FIELDS[placeOf(path)]
  const ours = names !== undefined && Object.hasOwn(names, field) ? names[field] : undefined
  return ours === undefined ? undefined : `did you mean "${ours}"?`
}

/** How deep a place of placesOf is: its fields and array levels. */
function depthOf(place: string): number {
  return place === '' ? 0 : place.split(/\.|\[\]/).length
}
