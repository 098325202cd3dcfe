/**
 * Request predicates shared by the middleware's rules and the gateway's
 * routes: path patterns, methods, hosts and header values.
 */
import { ArgumentError } from '../core/errors.ts'
import { didYouMean } from '../core/suggest.ts'
import type { HttpRequest } from './handler.ts'
import { compileGlob, foldCase } from './glob.ts'
import { normalizePath } from './path.ts'
import { ITEMS_PER_SLICE, runInSlices, runToEnd } from '../core/turn.ts'

export interface MatchOptions {
  /** Path patterns: `*` matches within a segment, `**` across segments (`/api/**`: `/api` and all below it). */
  path?: string | string[] | undefined
  /** Methods, e.g. `['POST', 'PUT']`. `GET` includes `HEAD`. */
  method?: string | string[] | undefined
  /** Hosts, exact or `*.example.com`. */
  host?: string | string[] | undefined
  /** Path patterns not matched, even when `path` matches. */
  exclude?: string | string[] | undefined
  /** Header values by name: the exact value, or `true` for "present with any value". */
  headers?: Record<string, string | true> | undefined
}

const MATCH_OPTIONS = new Set(['path', 'method', 'host', 'exclude', 'headers'])

/** A compiled match: whether a request meets every given predicate. */
export interface RequestMatch {
  /** Whether the request matches with its path and method read any way a server may read them (see pathReadings, methodReadings). */
  (request: HttpRequest): boolean
  /** Whether it matches with its path read as `path` and its method as `method` (default: as sent), and only so. */
  at(request: HttpRequest, path: string, method?: string): boolean
}

/** Compiles the predicates once (bad ones throw here); every given predicate must hold. */
export function compileMatch(match: MatchOptions, what: string, caseSensitive = true): RequestMatch {
  if (typeof match !== 'object' || match === null) {
    throw new ArgumentError(what, match, 'must be an object of predicates or a function', typeof match === 'string' ? `a path pattern goes in path: match: { path: ${JSON.stringify(match)} }` : undefined)
  }
  for (const [name, value] of Object.entries(match)) {
    if (!MATCH_OPTIONS.has(name) && value !== undefined) throw new ArgumentError(`${what}.${name}`, value, `is not a match option (known: ${[...MATCH_OPTIONS].join(', ')})`, didYouMean(name, MATCH_OPTIONS))
  }
  const paths = match.path === undefined ? undefined : compilePaths(list(match.path), `${what}.path`, caseSensitive)
  const excluded = match.exclude === undefined ? undefined : compilePaths(list(match.exclude), `${what}.exclude`, caseSensitive)
  const pathHolds = (path: string): boolean => (paths === undefined || paths(path)) && (excluded === undefined || !excluded(path))
  for (const method of match.method === undefined ? [] : list(match.method)) {
    if (!isToken(method)) throw new ArgumentError(`${what}.method`, method, 'must be HTTP methods, such as GET or POST')
  }
  const methods = match.method === undefined ? undefined : new Set(methodNames(match.method))
  const hosts = match.host === undefined ? undefined : list(match.host).map((h) => compileHost(h, `${what}.host`))
  const headers = match.headers === undefined ? undefined : compileHeaders(match.headers, `${what}.headers`)
  const others = (request: HttpRequest): boolean =>
    (hosts === undefined || hostMatches(hosts, request.host) || hostMatches(hosts, request.hostAsUrl)) &&
    (headers === undefined || headers(request))
  const methodMatches = methods === undefined ? () => true : (request: HttpRequest) => anyMethod(request, methods)
  const pathMatches = paths === undefined && excluded === undefined ? () => true : (request: HttpRequest) => anyReading(request, pathHolds)
  const matches = ((request: HttpRequest) => pathMatches(request) && methodMatches(request) && others(request)) as RequestMatch
  matches.at = (request, path, method = request.method) => pathHolds(path) && (methods === undefined || methods.has(method.toUpperCase())) && others(request)
  return matches
}

/**
 * The headers through which a POST asks to be served as another method:
 * Express's method-override, ASP.NET Core's UseHttpMethodOverride, Rack and
 * Laravel read X-HTTP-Method-Override; the others are their common variants.
 */
const METHOD_OVERRIDES = ['x-http-method-override', 'x-http-method', 'x-method-override']

/** The query parameter an HTML form's POST names its method in: Laravel, Symfony, method-override('_method'), Hono. */
const METHOD_PARAMETERS: ReadonlySet<string> = new Set(['_method', '_method[]'])
/** A query that may name `_method`, spelled out or percent-encoded (`?_m%65thod=`): only such a query is parsed. */
const MAY_NAME_METHOD = /method|%/i

/**
 * Every method a server may read from the request's, the method as sent
 * first, upper case: a POST is also each method its override headers name,
 * and its `_method` query parameter (those frameworks override POST only).
 * So a limit on DELETE holds against a POST that an application behind
 * serves as DELETE. (A `_method` in a form body is beyond any limiter.)
 *
 * Of a field or parameter given several times, the first and the last value
 * are read, which is what the frameworks take (method-override the first,
 * PHP the last): at most nine readings, however many a client sends.
 */
export function methodReadings(request: HttpRequest): string[] {
  const readings = [request.method.toUpperCase()]
  if (readings[0] !== 'POST') return readings
  // Asked once per rule with a method predicate: a long query is parsed once per request.
  const known = overriddenReadings.get(request)
  if (known !== undefined) return known
  overriddenReadings.set(request, readings)
  const named: string[] = []
  for (const name of METHOD_OVERRIDES) {
    const value = request.header(name)
    if (value === undefined) continue
    // A field given several times arrives joined with commas: its first and last values, without splitting the rest.
    const comma = value.indexOf(',')
    named.push(...(comma === -1 ? [value] : [value.slice(0, comma), value.slice(value.lastIndexOf(',') + 1)]))
  }
  if (request.query !== undefined && MAY_NAME_METHOD.test(request.query)) {
    const values: string[] = []
    for (const [name, value] of new URLSearchParams(request.query)) if (METHOD_PARAMETERS.has(name)) values.push(value)
    named.push(...firstAndLast(values))
  }
  for (const value of named) {
    const method = value.trim().toUpperCase()
    if (isToken(method) && !readings.includes(method)) readings.push(method)
  }
  return readings
}

const overriddenReadings = new WeakMap<HttpRequest, string[]>()

function firstAndLast(values: readonly string[]): string[] {
  return values.length <= 2 ? [...values] : [values[0] as string, values[values.length - 1] as string]
}

/** Whether the request's method may read as another one (see methodReadings): a POST with an override header or `_method`. */
export function overridesMethod(request: HttpRequest): boolean {
  return request.method.toUpperCase() === 'POST' &&
    (METHOD_OVERRIDES.some((name) => request.header(name) !== undefined) || (request.query !== undefined && MAY_NAME_METHOD.test(request.query)))
}

/** Whether the method as sent, or one its override headers name, is among `methods`. */
function anyMethod(request: HttpRequest, methods: ReadonlySet<string>): boolean {
  if (methods.has(request.method.toUpperCase())) return true
  return overridesMethod(request) && methodReadings(request).some((method) => methods.has(method))
}

/** Whether a path reads differently to some server: it holds `;`, a backslash or an encoded slash. */
const READ_DIFFERENTLY = /[;\\]|%2f|%5c/i

/** Whether the request's path may read as another path to some server (see pathReadings). */
export function readsDifferently(request: HttpRequest): boolean {
  return request.pathAsUrl !== undefined || READ_DIFFERENTLY.test(request.path)
}

/** Whether `test` holds for any reading of the request's path (the path as sent first, at no cost beyond it when there is no other). */
export function anyReading(request: HttpRequest, test: (path: string) => boolean): boolean {
  if (test(request.path)) return true
  return readsDifferently(request) && pathReadings(request).some(test)
}

/**
 * Every path a server may read from the request's, the path as sent first,
 * each normalized: with its `;parameters` cut from each segment
 * (`/login;jsessionid=1`, `/api;x/login`, `/static/..;/login`: Tomcat, Jetty
 * and Spring route those as `/login`, `/api/login` and `/login`), ending at its
 * first `;` (Fastify's `useSemicolonDelimiter` routes `/login;x/y` as
 * `/login`), with `\` as `/` (IIS), and with an encoded slash as a slash
 * (nginx decodes `%2F` before it resolves dots: `/x%2F..%2Flogin` is its
 * `/login`); and for a `sluice/node` listener, the path WHATWG URL reads
 * (HttpRequest.pathAsUrl).
 *
 * A rule matches when its patterns match one of these readings and its
 * `exclude` does not exclude that reading; `skip` skips a request only when it
 * skips every reading. So a limit holds against any of them: without this, a
 * limit in front of such servers could be walked around (`/x%2F..%2Flogin`
 * past a limit on `/login`, `/static/..%2Flogin` past one on `/**` that
 * excludes `/static/**`). Another upstream serves such a path as another one,
 * which then meets the limit as well.
 */
export function pathReadings(request: HttpRequest): string[] {
  const readings: string[] = []
  const add = (path: string): void => {
    if (!readings.includes(path)) readings.push(path)
  }
  for (const path of request.pathAsUrl === undefined ? [request.path] : [request.path, request.pathAsUrl]) {
    add(path)
    if (!READ_DIFFERENTLY.test(path)) continue
    const slashes = path.replace(/\\|%2f|%5c/gi, '/')
    const semicolon = path.indexOf(';')
    add(normalizePath(slashes))
    if (semicolon !== -1) {
      add(normalizePath(withoutParameters(path)))
      add(normalizePath(withoutParameters(slashes)))
      add(normalizePath(path.slice(0, semicolon)))
      add(normalizePath(slashes.slice(0, slashes.indexOf(';'))))
    }
  }
  return readings
}

/** A path with each segment's `;parameters` cut. */
function withoutParameters(path: string): string {
  return path.replace(/;[^/\\]*/g, '')
}

/** Path patterns (see compileGlob), one or a list: a path matches when any of them does. */
export function compilePaths(patterns: string | readonly string[], what: string, caseSensitive = true): (path: string) => boolean {
  if (typeof patterns !== 'string' && !Array.isArray(patterns)) throw new ArgumentError(what, patterns, 'must be path patterns starting with "/" (one, or a list)')
  const matchers = (typeof patterns === 'string' ? [patterns] : patterns).map((pattern) => {
    if (typeof pattern !== 'string' || !pattern.startsWith('/')) throw new ArgumentError(what, pattern, 'must be path patterns starting with "/"')
    return compileGlob(pattern, caseSensitive)
  })
  // A loop, not matchers.some(): its callback would be a new closure per request.
  return (path) => {
    for (const matches of matchers) if (matches(path)) return true
    return false
  }
}

/**
 * The entries (a gateway's routes, a pipeline's rules) that may match a
 * request, in their order, found without trying each. An entry whose `host`
 * names hosts is looked up by the request's host: an exact host under that
 * host, a `*.example.com` under the hosts that end in `.example.com` (a tree
 * of labels from the right, as DNS reads them). One whose path patterns start
 * with literal segments (`/api/orders/**`, `/login`) is looked up by the
 * request's leading segments, folded alike when matching ignores case.
 * Entries without such predicates (no `match` object, a `/**` or `/v*`
 * pattern) are candidates for every request. A request is looked up under
 * each reading of its path (see pathReadings) and of its host (`hostAsUrl`),
 * so no entry that `compileMatch` would match is ever left out. `matchOf`
 * gives an entry's predicates as compileMatch took them.
 */
export function candidatesFor<T>(entries: readonly T[], matchOf: (entry: T) => MatchOptions | undefined, caseSensitive = true): (request: HttpRequest) => readonly T[] {
  return runToEnd(buildCandidates(entries, matchOf, caseSensitive))
}

/** candidatesFor for thousands of entries (a gateway's routes, on a reload): the event loop is let go between slices of them. */
export function candidatesForInSlices<T>(entries: readonly T[], matchOf: (entry: T) => MatchOptions | undefined, caseSensitive = true): Promise<(request: HttpRequest) => readonly T[]> {
  return runInSlices(buildCandidates(entries, matchOf, caseSensitive))
}

/** Builds candidatesFor's lookup, pausing (`yield`) after each slice of entries. */
export function* buildCandidates<T>(entries: readonly T[], matchOf: (entry: T) => MatchOptions | undefined, caseSensitive = true): Generator<void, (request: HttpRequest) => readonly T[], void> {
  const byPath = (subset: readonly T[]) => buildCandidatesByPath(subset, (entry) => matchOf(entry)?.path, caseSensitive)
  const anyHost: number[] = []
  const root = hostNode<T>()
  for (const [index, entry] of entries.entries()) {
    if ((index + 1) % ITEMS_PER_SLICE === 0) yield
    const hosts = optionalList(matchOf(entry)?.host)
    if (hosts === undefined) {
      anyHost.push(index)
      continue
    }
    for (const host of hosts) {
      const bare = bareHost(host)
      const wildcard = bare.startsWith('*.')
      let node = root
      for (const label of (wildcard ? bare.slice(2) : bare).split('.').reverse()) {
        let next = node.children.get(label)
        if (next === undefined) node.children.set(label, next = hostNode<T>())
        node = next
      }
      const own = wildcard ? node.below : node.exact
      if (own[own.length - 1] !== index) own.push(index)
    }
  }
  if (root.children.size === 0) return yield* byPath(entries)
  // Each node's two lists hold the entries for any host too: past a bound on their sum, entries are looked up by path alone.
  // The sum is known before the lists are built: many hosts beside many routes for any host need not build 100,000 entries to find it out.
  if (anyHost.length + [...root.children.values()].reduce((sum, child) => sum + mergedSize(child, anyHost.length), 0) > MAX_MERGED) return yield* byPath(entries)
  let merged = 0
  const lists = new Map<string, (request: HttpRequest) => readonly T[]>()
  function* lookUpOf(indices: readonly number[]): Generator<void, (request: HttpRequest) => readonly T[], void> {
    const sorted = [...new Set(indices)].sort((a, b) => a - b)
    const id = sorted.join(',')
    let found = lists.get(id)
    if (found === undefined) {
      merged += sorted.length
      lists.set(id, found = yield* byPath(sorted.map((index) => entries[index] as T)))
    }
    return found
  }
  root.belowIndices = anyHost
  root.belowLookUp = yield* lookUpOf(anyHost)
  function* fill(node: HostNode<T>, parent: HostNode<T>): Generator<void, boolean, void> {
    node.exactLookUp = node.exact.length === 0 ? parent.belowLookUp : yield* lookUpOf([...parent.belowIndices, ...node.exact])
    node.belowIndices = node.below.length === 0 ? parent.belowIndices : [...parent.belowIndices, ...node.below]
    node.belowLookUp = node.below.length === 0 ? parent.belowLookUp : yield* lookUpOf(node.belowIndices)
    if (merged > MAX_MERGED) return false
    for (const child of node.children.values()) if (!(yield* fill(child, node))) return false
    return true
  }
  for (const child of root.children.values()) if (!(yield* fill(child, root))) return yield* byPath(entries)
  const elsewhere = root.belowLookUp
  // Walks the host's labels from the right as far as the tree names them: its node if it gets to the end, else the wildcards above.
  const lookUp = (host: string | undefined): ((request: HttpRequest) => readonly T[]) => {
    if (host === undefined) return elsewhere
    const bare = bareHost(host)
    let node = root
    for (let end = bare.length; ;) {
      // At 0, lastIndexOf would find index 0 again: a leading dot leaves an empty label, and the walk ends.
      const dot = end === 0 ? -1 : bare.lastIndexOf('.', end - 1)
      const next = node.children.get(bare.slice(dot + 1, end))
      if (next === undefined) return node.belowLookUp
      if (dot === -1) return next.exactLookUp
      node = next
      end = dot
    }
  }
  const position = new Map(entries.map((entry, index) => [entry, index]))
  const inOrder = (found: Iterable<T>): T[] => [...new Set(found)].sort((a, b) => (position.get(a) as number) - (position.get(b) as number))
  return (request) => {
    const found = lookUp(request.host)(request)
    return request.hostAsUrl === undefined ? found : inOrder([...found, ...lookUp(request.hostAsUrl)(request)])
  }
}

interface HostNode<T> {
  children: Map<string, HostNode<T>>
  /** The entries naming the host that ends here, and those naming `*.` and it. */
  exact: number[]
  below: number[]
  /** The entries for a host that ends here, and for one below it: wildcards from here up, and entries for any host. */
  exactLookUp: (request: HttpRequest) => readonly T[]
  belowIndices: readonly number[]
  belowLookUp: (request: HttpRequest) => readonly T[]
}

/** The entries `node`'s lists and those below it would hold in all (before lists alike are shared), its parent's `below` holding `inherited`. */
function mergedSize(node: HostNode<unknown>, inherited: number): number {
  const below = inherited + node.below.length
  let size = (node.exact.length === 0 ? 0 : inherited + node.exact.length) + (node.below.length === 0 ? 0 : below)
  for (const child of node.children.values()) size += mergedSize(child, below)
  return size
}

function hostNode<T>(): HostNode<T> {
  const none = () => []
  return { children: new Map(), exact: [], below: [], exactLookUp: none, belowIndices: [], belowLookUp: none }
}

/** How many entries the lists merged ahead may hold in all (several MB): a config of thousands of routes of both kinds goes past it. */
const MAX_MERGED = 100_000

/**
 * candidatesFor by paths alone: a tree of the patterns' literal leading
 * segments (`/api/orders/**` is filed under api, then orders; `/api/v*` and
 * `/**` where their wildcard begins). A pattern matches only paths that begin
 * with its literal segments, so a request's candidates are the entries filed
 * along its own path through the tree: each node holds them, ancestors'
 * included, merged once.
 */
function* buildCandidatesByPath<T>(entries: readonly T[], pathsOf: (entry: T) => string | string[] | undefined, caseSensitive: boolean): Generator<void, (request: HttpRequest) => readonly T[], void> {
  const fold = caseSensitive ? (segment: string) => segment : foldCase
  const root = pathNode<T>()
  for (const [index, entry] of entries.entries()) {
    if ((index + 1) % ITEMS_PER_SLICE === 0) yield
    for (const pattern of optionalList(pathsOf(entry)) ?? ['/**']) {
      let node = root
      for (const segment of literalSegments(pattern)) {
        const folded = fold(segment)
        let next = node.children.get(folded)
        if (next === undefined) node.children.set(folded, next = pathNode<T>())
        node = next
      }
      if (node.own[node.own.length - 1] !== index) node.own.push(index)
    }
  }
  if (root.children.size === 0) return () => entries
  // Each node's entries with its ancestors', in order; past the bound, every request tries every entry.
  let merged = 0
  let filled = 0
  function* fill(node: PathNode<T>, inherited: readonly number[]): Generator<void, boolean, void> {
    if (++filled % ITEMS_PER_SLICE === 0) yield
    node.indices = node.own.length === 0 ? inherited : [...new Set([...inherited, ...node.own])].sort((a, b) => a - b)
    node.found = node.indices.map((index) => entries[index] as T)
    merged += node.indices.length
    if (merged > MAX_MERGED) return false
    for (const child of node.children.values()) if (!(yield* fill(child, node.indices))) return false
    return true
  }
  if (!(yield* fill(root, []))) return () => entries
  const deepest = (path: string): PathNode<T> => {
    let node = root
    for (let start = 1; start <= path.length;) {
      const end = path.indexOf('/', start)
      const next = node.children.get(fold(path.slice(start, end === -1 ? path.length : end)))
      if (next === undefined) break
      node = next
      if (end === -1) break
      start = end + 1
    }
    return node
  }
  return (request) => {
    if (!readsDifferently(request)) return deepest(request.path).found
    const nodes = new Set(pathReadings(request).map(deepest))
    if (nodes.size === 1) return ([...nodes][0] as PathNode<T>).found
    return [...new Set([...nodes].flatMap((node) => node.indices))].sort((a, b) => a - b).map((index) => entries[index] as T)
  }
}

interface PathNode<T> {
  children: Map<string, PathNode<T>>
  /** The entries with a pattern whose literal segments end here. */
  own: number[]
  /** These and every ancestor's, ascending; `found`, the entries themselves. */
  indices: readonly number[]
  found: readonly T[]
}

function pathNode<T>(): PathNode<T> {
  return { children: new Map(), own: [], indices: [], found: [] }
}

/** A pattern's segments up to its first wildcard: `api`, `orders` of `/api/orders/**`; none of `/**`, or of what is not a pattern. */
function literalSegments(pattern: unknown): string[] {
  if (typeof pattern !== 'string' || !pattern.startsWith('/')) return []
  const segments = pattern.slice(1).split('/')
  const wild = segments.findIndex((segment) => segment.includes('*'))
  return wild === -1 ? segments : segments.slice(0, wild)
}

/**
 * Whether every request `inner` matches is matched by `outer`: the test that
 * finds a rule or route that can never match. Conservative: it answers true
 * only when it is sure (literal patterns and trailing `/**`), so it can miss a
 * shadowed route but never reports a reachable one.
 */
export function matchCovers(outer: MatchOptions, inner: MatchOptions, caseSensitive = true): boolean {
  if (outer.exclude !== undefined) return false
  const fold = (text: string) => (caseSensitive ? text : text.toLowerCase())
  const covered = <T>(outerList: T[] | undefined, innerList: T[] | undefined, covers: (o: T, i: T) => boolean) =>
    outerList === undefined || (innerList !== undefined && innerList.every((i) => outerList.some((o) => covers(o, i))))
  const methods = (value: string | string[] | undefined) => (value === undefined ? undefined : methodNames(value))
  const outerHeaders = Object.entries(outer.headers ?? {})
  return covered(optionalList(outer.path), optionalList(inner.path) ?? ['/**'], (o, i) => patternCovers(fold(o), fold(i))) &&
    covered(methods(outer.method), methods(inner.method), (o, i) => o === i) &&
    covered(optionalList(outer.host)?.map(bareHost), optionalList(inner.host)?.map(bareHost), (o, i) => o === i || (o.startsWith('*.') && i.endsWith(o.slice(1)))) &&
    outerHeaders.every(([name, expected]) => {
      const given = Object.entries(inner.headers ?? {}).find(([other]) => other.toLowerCase() === name.toLowerCase())?.[1]
      return given !== undefined && (expected === true || given === expected)
    })
}

/**
 * Whether some request may match both `a` and `b` (a gateway route and a
 * limit within it). Conservative the other way from matchCovers: false only
 * when sure, when their paths cannot meet, or their methods cannot (only a
 * POST reads as a second method, through an override, so POST never rules
 * a meeting out).
 */
export function matchesMeet(a: MatchOptions, b: MatchOptions, caseSensitive = true): boolean {
  const aPaths = optionalList(a.path) ?? ['/**']
  const bPaths = optionalList(b.path) ?? ['/**']
  if (!aPaths.some((one) => bPaths.some((other) => pathsMeet(one, other, caseSensitive)))) return false
  if (a.method === undefined || b.method === undefined) return true
  const aMethods = methodNames(a.method)
  const bMethods = methodNames(b.method)
  return aMethods.includes('POST') || bMethods.includes('POST') || aMethods.some((method) => bMethods.includes(method))
}

/**
 * Two path patterns may match one path: a pattern without wildcards is that
 * path, tried on the other; else their literal starts, up to the first
 * wildcard, must agree for as long as both go.
 */
function pathsMeet(one: string, other: string, caseSensitive: boolean): boolean {
  const fixed = (pattern: string) => !pattern.includes('*')
  const tries = (pattern: string, path: string) => {
    const matches = compileGlob(pattern, caseSensitive)
    return matches(path) || (!path.endsWith('/') && matches(`${path}/`))
  }
  if (fixed(one)) return tries(other, one)
  if (fixed(other)) return tries(one, other)
  const fold = (text: string) => (caseSensitive ? text : text.toLowerCase())
  const start = (pattern: string) => fold(pattern.slice(0, pattern.indexOf('*')))
  return start(one).startsWith(start(other)) || start(other).startsWith(start(one))
}

/** A rule that excludes every path it names: by its own `exclude`, or by `skip` patterns in force around it. */
export function excludesAll(match: MatchOptions, skip: string | string[] = [], caseSensitive = true): boolean {
  const excluded = [...optionalList(match.exclude) ?? [], ...list(skip)]
  return excluded.length > 0 && matchCovers({ path: excluded }, { path: match.path }, caseSensitive)
}

/** Path pattern `outer` matches every path `inner` matches: the same pattern, or `<prefix>/**` above it. */
function patternCovers(outer: string, inner: string): boolean {
  if (outer === inner || outer === '/**') return true
  if (!outer.endsWith('/**')) return false
  const prefix = outer.slice(0, -3)
  return !prefix.includes('*') && (inner === prefix || inner.startsWith(`${prefix}/`))
}

function optionalList(value: string | string[] | undefined): string[] | undefined {
  return value === undefined ? undefined : list(value)
}

/** Upper-case method names; `GET` brings `HEAD`, since Express, Fastify and Spring answer HEAD with the GET handler. */
function methodNames(value: string | string[]): string[] {
  const upper = list(value).map((method) => method.toUpperCase())
  return upper.includes('GET') ? [...upper, 'HEAD'] : upper
}

/** Whether one of the compiled host patterns matches `host`, made bare once for all of them. */
function hostMatches(hosts: ReadonlyArray<(bare: string) => boolean>, host: string | undefined): boolean {
  if (host === undefined) return false
  const bare = bareHost(host)
  return hosts.some((matches) => matches(bare))
}

/**
 * A host as compared: lower case, without port, and without the trailing dot
 * of a fully qualified name (one host to DNS and to the servers behind). The
 * host ends at its first colon past an IPv6 literal's brackets, whatever
 * follows, as Express's req.hostname and Fastify's request.hostname end it:
 * `Host: api.test:x` is api.test to them.
 */
export function bareHost(host: string): string {
  const lower = host.toLowerCase()
  const colon = lower.indexOf(':', lower.startsWith('[') ? lower.indexOf(']') + 1 : 0)
  let end = colon === -1 ? lower.length : colon
  while (end > 0 && lower.charCodeAt(end - 1) === 0x2e) end--
  return lower.slice(0, end)
}

/** A host as the Host header carries it (a name, an IPv4 or a bracketed IPv6 address, an optional port), or `*.` and a name. */
const HOST_PATTERN = /^(?:(?:\*\.)?[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?|\[[0-9a-f:.]+\])(?::\d{1,5})?$/i

/** A host pattern, exact or `*.example.com`, as a test of a bare host (see bareHost). */
function compileHost(host: string, what: string): (bare: string) => boolean {
  if (typeof host !== 'string' || !HOST_PATTERN.test(host)) {
    throw new ArgumentError(what, host, 'must be host names, as the Host header carries them: api.example.com, *.example.com, 192.0.2.1 or [2001:db8::1], optionally with :port; no scheme or path, and an international name in its xn-- form')
  }
  const wanted = bareHost(host)
  if (wanted.startsWith('*.')) {
    const suffix = wanted.slice(1)
    return (bare) => bare.endsWith(suffix)
  }
  return (bare) => bare === wanted
}

function compileHeaders(headers: Record<string, string | true>, what: string): (request: HttpRequest) => boolean {
  if (typeof headers !== 'object' || headers === null) throw new ArgumentError(what, headers, 'must map header names to values (or true)')
  const checks = Object.entries(headers).map(([name, expected]) => {
    if (!isHeaderName(name)) throw new ArgumentError(`${what}`, name, 'must be header names')
    if (expected !== true && typeof expected !== 'string') throw new ArgumentError(`${what}.${name}`, expected, 'must be a string or true')
    const lower = name.toLowerCase()
    return (request: HttpRequest) => {
      const value = request.header(lower)
      return expected === true ? value !== undefined : value === expected
    }
  })
  return (request) => checks.every((check) => check(request))
}

/**
 * The methods node's HTTP parser accepts (node:http's `METHODS`, as of Node 20);
 * it answers any other with 400, so no node:http, Express or Fastify app, nor
 * the gateway, ever sees one. Kept here rather than imported: the fetch
 * adapter runs where node:http may not exist.
 */
export const NODE_METHODS: ReadonlySet<string> = new Set(['ACL', 'BIND', 'CHECKOUT', 'CONNECT', 'COPY', 'DELETE', 'GET', 'HEAD', 'LINK', 'LOCK',
  'M-SEARCH', 'MERGE', 'MKACTIVITY', 'MKCALENDAR', 'MKCOL', 'MOVE', 'NOTIFY', 'OPTIONS', 'PATCH', 'POST', 'PROPFIND', 'PROPPATCH', 'PURGE', 'PUT',
  'QUERY', 'REBIND', 'REPORT', 'SEARCH', 'SOURCE', 'SUBSCRIBE', 'TRACE', 'UNBIND', 'UNLINK', 'UNLOCK', 'UNSUBSCRIBE'])

/** The methods a predicate names that no request reaching node carries: most likely a typo (`PSOT`). */
export function unknownMethods(match: MatchOptions): string[] {
  return match.method === undefined ? [] : list(match.method).filter((method) => !NODE_METHODS.has(method.toUpperCase()))
}

/** RFC 9110 5.6.2: what field names (5.1) and methods (9.1) are made of. */
export const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/

function isToken(value: unknown): value is string {
  return typeof value === 'string' && TOKEN.test(value)
}

/** A field name as RFC 9110 5.1 allows it: a token. */
export const isHeaderName = isToken

function list(value: string | string[]): string[] {
  return Array.isArray(value) ? value : [value]
}
