/**
 * The gateway's YAML file: parsed with `yaml` (so every problem can name its
 * line), `${ENV}` references substituted in string values, checked by a zod
 * schema, then by sluice's own policy validation. A wrong file is refused with
 * every problem listed, each as `path: problem (line N)`.
 */
import { createHash } from 'node:crypto'
import { dirname, resolve } from 'node:path'
import { createSecureContext } from 'node:tls'
import { isUtf8 } from 'node:buffer'
import { deserialize, getHeapStatistics, serialize } from 'node:v8'
import { Worker } from 'node:worker_threads'
import { isAlias, isScalar, LineCounter, parseDocument, visit, type Document } from 'yaml'
import safeRegex from 'safe-regex2'
import { z } from 'zod'
import { REFUNDABLE } from '../algorithms/index.ts'
import { ArgumentError, maskCredentials, PolicyError, SluiceError } from '../core/errors.ts'
import { readFileBounded } from '../core/files.ts'
import { letIoIn } from '../core/turn.ts'
import { limitOf, OPTIONAL_POLICY_FIELDS, POLICY_FIELDS, resolvePolicies, resolvePolicy } from '../core/policy.ts'
import type { Policy, ResolvedPolicy } from '../core/types.ts'
import { clientIpResolver, everyAddressWarning, type ClientIpOptions } from '../http/client-ip.ts'
import { apiKey, jwtVerifier, type JwtVerifierOptions } from '../http/identity.ts'
import { bareHost, compileMatch, excludesAll, matchCovers, matchesMeet, NODE_METHODS, TOKEN, unknownMethods, type MatchOptions } from '../http/match.ts'
import { partitionKeyProblem } from '../http/headers.ts'

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

/**
 * A value in a problem, cut short (a file given by mistake, a key list or a
 * certificate, is not echoed into logs) and with any URL's credentials masked
 * (`redis://***@host`): check-config runs in CI logs.
 */
const show = (value: unknown): string => {
  // A `!!binary` value: bytes, whose JSON would be a list of numbers.
  if (value instanceof Uint8Array) return `binary data (!!binary, ${value.byteLength} bytes)`
  const text = maskCredentials(value === undefined ? 'nothing' : JSON.stringify(value) ?? String(value))
  return text.length > 80 ? `${text.slice(0, 60)}... (${text.length} characters)` : text
}

/** A policy's name in a problem: no secret, and a derived one (`token-bucket:5@1/1s`) is no URL's credentials to mask. */
const policyName = (name: string): string => JSON.stringify(name)

/** What a value is, for problems with fields whose values are secrets: never the value itself. */
const kindOf = (value: unknown): string =>
  value === null ? 'null' : Array.isArray(value) ? 'a list' : typeof value === 'object' ? 'an object' : `a ${typeof value} (not shown: a secret)`

/** A password, a shared secret, an API key: its problems say what it should be, never what it is. */
const secret = (mayBeEmpty: boolean) => {
  const text = z.string({ error: (issue) => `expected a${mayBeEmpty ? '' : ' non-empty'} string, got ${kindOf(issue.input)}` })
  return mayBeEmpty ? text : text.min(1, { error: 'expected a non-empty string' })
}

const positiveInt = (what = 'a positive integer') =>
  z.number({ error: (issue) => `expected ${what}, got ${show(issue.input)}` })
    .int({ error: (issue) => `expected ${what}, got ${show(issue.input)}` })
    .positive({ error: (issue) => `expected ${what}, got ${show(issue.input)}` })
    .max(Number.MAX_SAFE_INTEGER)
const milliseconds = positiveInt('a positive number of milliseconds').max(2 ** 31 - 1, { error: (issue) => `expected at most 2147483647 ms, got ${show(issue.input)}` })
const nonEmpty = z.string({ error: (issue) => `expected a non-empty string, got ${show(issue.input)}` }).min(1, { error: 'expected a non-empty string' })
const stringOrList = z.union([nonEmpty, z.array(nonEmpty).min(1)], { error: (issue) => `expected a string or a list of strings, got ${show(issue.input)}` })
const name = z.string({ error: (issue) => `expected a name, got ${show(issue.input)}` })
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, { error: (issue) => `expected 1 to 64 letters, digits, ".", "_" or "-", got ${show(issue.input)}` })

/** `host:port`, `[::1]:port`, or a port (on 127.0.0.1). Port 0 picks a free one. */
const listen = z.union([z.string(), z.number()], { error: (issue) => `expected "host:port" or a port number, got ${show(issue.input)}` })
  .transform((value, context) => {
    const text = String(value)
    const match = /^(?:(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):)?(\d{1,5})$/.exec(text)
    const port = match === null ? NaN : Number(match[2])
    if (match === null || port > 65535) {
      context.addIssue({ code: 'custom', message: `expected "host:port" or a port number, got ${show(value)}` })
      return z.NEVER
    }
    return { host: (match[1] ?? '127.0.0.1').replace(/^\[|\]$/g, ''), port }
  })

const algorithmNames = Object.keys(POLICY_FIELDS)

/**
 * A policy exactly as the library takes it, checked by the library's own
 * `resolvePolicy` (the one source of truth for policy rules).
 */
const policy = z.record(z.string(), z.unknown(), { error: (issue) => `expected a policy (an object with "algorithm"), got ${show(issue.input)}` })
  .superRefine((raw, context) => {
    try {
      resolvePolicy(raw)
    } catch (error) {
      if (!(error instanceof PolicyError)) throw error
      const path = error.field === 'policy' ? [] : [error.field]
      context.addIssue({ code: 'custom', path, message: error.message.replace(/^policy "[^"]*": /, '').replace(new RegExp(`^${error.field} `), '') })
    }
  })
  .meta({
    id: 'policy',
    description: 'A policy: algorithm and its fields (see the README).',
    oneOf: algorithmNames.map((algorithm) => ({
      type: 'object',
      required: ['algorithm', ...(POLICY_FIELDS[algorithm as keyof typeof POLICY_FIELDS]).filter((f) => !OPTIONAL_POLICY_FIELDS.has(f))],
      additionalProperties: false,
      properties: {
        algorithm: { const: algorithm },
        name: { type: 'string', pattern: '^[\\x21-\\x7e]{1,64}$' },
        ...Object.fromEntries(POLICY_FIELDS[algorithm as keyof typeof POLICY_FIELDS].map((field) => [field,
          field === 'refill' ? { enum: ['greedy', 'interval'] } : field === 'mode' ? { enum: ['police', 'shape'] } : { type: 'integer', exclusiveMinimum: 0 }])),
      },
    })),
  })
const policies = z.union([z.array(policy).min(1, { error: 'expected at least one policy' }), policy], { error: (issue) => `expected a policy or a list of policies, got ${show(issue.input)}` })

const identityKinds = z.enum(['jwt', 'apiKey', 'ip'], { error: (issue) => `expected one of jwt, apiKey, ip, got ${show(issue.input)}` })

const match = z.strictObject({
  path: stringOrList.optional(),
  method: stringOrList.optional(),
  host: stringOrList.optional(),
  exclude: stringOrList.optional(),
  headers: z.record(z.string(), z.union([z.string(), z.literal(true)]), { error: 'expected header names mapped to a value or true' }).optional(),
}).meta({ id: 'match', description: 'Request predicates; every one given must hold. Paths: `*` within a segment, `**` across segments; `/orders/**` includes `/orders`.' })

/** One limit: the HTTP layer's rule, or Spring Cloud Gateway's RequestRateLimiter. */
const limit = z.strictObject({
  name: name.optional(),
  /** Narrows the limit within its route (e.g. only POST). */
  match: match.optional(),
  policies: policies.optional(),
  tiers: z.record(z.string(), policies, { error: 'expected tier names mapped to policies' }).optional(),
  replenishRate: positiveInt().optional(),
  burstCapacity: positiveInt().optional(),
  requestedTokens: positiveInt().optional(),
  key: z.array(identityKinds).min(1).optional(),
  cost: positiveInt().optional(),
  shadow: z.boolean().optional(),
  action: z.enum(['reject', 'queue'], { error: (issue) => `expected reject or queue, got ${show(issue.input)}` }).optional(),
  maxWaitMs: z.number().int().min(0).max(2 ** 31 - 1).optional(),
  /**
   * Which responses spend the limit: all, failed (status 400 and up) or succeeded; the others are refunded.
   * in-flight: requests hold their units only while in progress (a concurrency limit).
   */
  count: z.enum(['all', 'failed', 'succeeded', 'in-flight'], { error: (issue) => `expected all, failed, succeeded or in-flight, got ${show(issue.input)}` }).optional(),
}).superRefine((value, context) => {
  const scg = value.replenishRate !== undefined || value.burstCapacity !== undefined || value.requestedTokens !== undefined
  const forms = [value.policies !== undefined, value.tiers !== undefined, scg].filter(Boolean).length
  if (forms !== 1) {
    context.addIssue({ code: 'custom', message: 'needs exactly one of policies, tiers, or replenishRate + burstCapacity' })
  } else if (scg) {
    for (const field of ['replenishRate', 'burstCapacity'] as const) {
      if (value[field] === undefined) context.addIssue({ code: 'custom', path: [field], message: 'is required with Spring Cloud Gateway limits' })
    }
    if (value.cost !== undefined) context.addIssue({ code: 'custom', path: ['cost'], message: 'use requestedTokens with Spring Cloud Gateway limits' })
  }
  if (value.maxWaitMs !== undefined && value.action !== 'queue') context.addIssue({ code: 'custom', path: ['maxWaitMs'], message: 'applies only with action: queue' })
}).meta({ id: 'limit', description: 'policies, tiers, or Spring Cloud Gateway\'s replenishRate + burstCapacity (+ requestedTokens).' })

/** The token-bucket fields Spring Cloud Gateway's RequestRateLimiter fields become. */
const SCG_FIELDS: Record<string, string | undefined> = { capacity: 'burstCapacity', refillTokens: 'replenishRate' }

const upstreamUrl = z.string({ error: (issue) => `expected an http:// or https:// URL, got ${show(issue.input)}` }).superRefine((value, context) => {
  let url: URL | undefined
  try {
    url = new URL(value)
  } catch { /* reported below */ }
  if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.search !== '' || url.hash !== '' || url.username !== '') {
    context.addIssue({ code: 'custom', message: `expected an http:// or https:// URL without query or credentials, got ${show(value)}` })
  }
})

/** Which rate-limit fields responses carry. */
const headerStyle = z.strictObject({
  standard: z.union([z.enum(['draft-10', 'draft-8', 'draft-7', 'draft-6']), z.literal(false)], { error: (issue) => `expected draft-10, draft-8, draft-7, draft-6 or false, got ${show(issue.input)}` }).optional(),
  legacy: z.boolean().optional(),
  partitionKey: z.boolean().optional(),
  springCloudGateway: z.boolean().optional(),
})

/**
 * A `$n` or `$<name>` in a rewrite's replacement that names no group of its
 * pattern: String.replace then sends `$2` as written (or, for a missing
 * name, nothing), so the upstream would get a path nobody meant.
 */
function replacementProblem(pattern: string, replacement: string): string | undefined {
  let match: RegExpExecArray | null
  try {
    // An alternation that matches the empty string exposes the pattern's groups.
    match = new RegExp(`${pattern}|`).exec('')
  } catch {
    return undefined // the pattern's own problem is reported beside it
  }
  if (match === null) return undefined
  const groups = match.length - 1
  const names = Object.keys(match.groups ?? {})
  const plural = groups === 1 ? 'group' : 'groups'
  for (const reference of replacement.matchAll(/\$(\$|\d\d?|<([^>]*)>)/g)) {
    const [whole, body, name] = reference as unknown as [string, string, string | undefined]
    if (body === '$') continue
    if (name !== undefined) {
      if (!names.includes(name)) return `${whole} names no group of the pattern (${names.length === 0 ? 'it has no named groups' : `it has ${names.map((n) => `<${n}>`).join(', ')}`}): write $$ for a literal $`
      continue
    }
    // As String.replace reads $nn: two digits if the pattern has that many groups, else one.
    const index = Number(body) <= groups && body.length === 2 ? Number(body) : Number(body[0])
    if (index === 0 || index > groups) return `$${index === 0 ? body : body[0]} refers to a group the pattern does not have (it has ${groups} capturing ${plural}), so it would be sent as written; write $$ for a literal $`
  }
  return undefined
}

const route = z.strictObject({
  name,
  match: match.optional(),
  upstream: z.union([upstreamUrl, z.array(upstreamUrl).min(1)], { error: (issue) => `expected a URL or a list of URLs, got ${show(issue.input)}` }),
  stripPrefix: z.string().regex(/^\/.*[^/]$|^\/$/, { error: (issue) => `expected a path prefix starting with "/" (no trailing "/"), got ${show(issue.input)}` }).optional(),
  rewrite: z.strictObject({
    pattern: z.string().superRefine((value, context) => {
      try {
        new RegExp(value)
      } catch (error) {
        context.addIssue({ code: 'custom', message: `expected a regular expression: ${(error as Error).message}` })
        return
      }
      // It runs on every path a client sends: a nested quantifier, as in (a+)+, can take exponential time and stall the gateway.
      if (!safeRegex(value)) context.addIssue({ code: 'custom', message: `${show(value)} nests quantifiers (as (a+)+ does), which can take exponential time on a crafted path; rewrite it without` })
    }),
    replacement: z.string(),
  }).superRefine(({ pattern, replacement }, context) => {
    const problem = replacementProblem(pattern, replacement)
    if (problem !== undefined) context.addIssue({ code: 'custom', path: ['replacement'], message: problem })
  }).optional(),
  /** Send the client's Host to the upstream instead of the upstream's own. */
  preserveHost: z.boolean().optional(),
  /** Longest wait for the upstream's response headers; then 504. */
  timeoutMs: milliseconds.optional(),
  /** Active health checks: GET `path` on each upstream every `intervalMs`; one that fails is passed over until one passes. */
  healthCheck: z.strictObject({
    path: z.string().regex(/^\/[^\s?#]*$/, { error: (issue) => `expected a path starting with "/", got ${show(issue.input)}` }),
    intervalMs: milliseconds.default(5000),
    timeoutMs: milliseconds.default(2000),
  }).optional(),
  /** This route's header style, over the top-level `headers` (e.g. Spring Cloud Gateway's fields on the routes moved from it). */
  headers: headerStyle.optional(),
  limits: z.array(limit).default([]),
})

const redisOptions = {
  url: z.string().regex(/^rediss?:\/\//, { error: (issue) => `expected a redis:// or rediss:// URL, got ${show(issue.input)}` }).optional(),
  cluster: z.array(z.string().regex(/^(rediss?:\/\/)?[^\s/]+:\d+$/, { error: (issue) => `expected host:port or redis://host:port, got ${show(issue.input)}` })).min(1).optional(),
  sentinel: z.strictObject({
    sentinels: z.array(z.string().regex(/^[^\s/]+:\d+$/, { error: (issue) => `expected host:port, got ${show(issue.input)}` })).min(1),
    name: nonEmpty,
    password: secret(true).optional(),
  }).optional(),
  password: secret(true).optional(),
  time: z.enum(['server', 'client']).optional(),
  functions: z.boolean().optional(),
}

const failure = {
  onFailure: z.enum(['fallback', 'open', 'closed'], { error: (issue) => `expected fallback, open or closed, got ${show(issue.input)}` }).optional(),
  timeoutMs: milliseconds.optional(),
  expectedInstances: positiveInt().optional(),
}

const store = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('memory'), maxKeys: positiveInt().optional() }),
  z.strictObject({ type: z.literal('redis'), ...redisOptions, ...failure }).superRefine((value, context) => {
    const given = [value.url, value.cluster, value.sentinel].filter((v) => v !== undefined).length
    if (given !== 1) context.addIssue({ code: 'custom', message: 'needs exactly one of url, cluster or sentinel' })
  }),
], { error: ({ input }) => {
  if (typeof input === 'object' && input !== null && !Array.isArray(input)) return `expected type: memory or type: redis, got ${show((input as { type?: unknown }).type)}`
  const url = typeof input === 'string' && /^rediss?:\/\//i.test(input) ? ` (a Redis URL goes inside it: { type: redis, url: ${show(input)} })` : ''
  return `expected an object with type: memory or type: redis${url}, got ${show(input)}`
} })

const identity = z.strictObject({
  jwt: z.strictObject({
    algorithms: z.array(nonEmpty).min(1),
    secret: secret(false).optional(),
    publicKey: nonEmpty.optional(),
    publicKeyFile: nonEmpty.optional(),
    jwksUrl: z.url().optional(),
    claim: nonEmpty.optional(),
    issuer: stringOrList.optional(),
    audience: stringOrList.optional(),
  }).superRefine((value, context) => {
    if ([value.secret, value.publicKey, value.publicKeyFile, value.jwksUrl].filter((v) => v !== undefined).length !== 1) {
      context.addIssue({ code: 'custom', message: 'needs exactly one of secret, publicKey, publicKeyFile or jwksUrl' })
    }
  }).optional(),
  apiKey: z.strictObject({
    header: nonEmpty.default('x-api-key'),
    /** The keys that exist; another value is no identity. Without keys (or keysFile) any value is a key. */
    keys: z.array(secret(false)).min(1).optional(),
    /** A file of keys, one per line (`#` comments, blank lines ignored), read at start and on reload. */
    keysFile: nonEmpty.optional(),
  }).refine((value) => value.keys === undefined || value.keysFile === undefined, { message: 'takes keys or keysFile, not both' }).optional(),
  clientIp: z.strictObject({
    trustProxy: z.union([z.array(nonEmpty), z.number().int().min(0), z.literal(false)], { error: (issue) => `expected a list of proxy addresses or CIDRs ([10.0.0.0/8]), a hop count, or false, got ${show(issue.input)}` }).optional(),
    ipv6Prefix: z.number().int().min(1).max(128).optional(),
    /** The header the trusted proxies write; only that one is read. */
    header: z.enum(['x-forwarded-for', 'forwarded']).optional(),
  }).optional(),
  /** Which resolvers identify a request, first match wins. Default: the configured ones (jwt, apiKey), then ip. */
  order: z.array(identityKinds).min(1).optional(),
  emptyKey: z.enum(['anonymous', 'forbid']).optional(),
})

const tiers = z.strictObject({
  from: z.union([z.strictObject({ jwtClaim: nonEmpty }), z.strictObject({ header: nonEmpty })], { error: 'expected { jwtClaim: <claim> } or { header: <name> }' }),
  default: nonEmpty,
})

const fieldName = z.string({ error: (issue) => `expected a header name, got ${show(issue.input)}` })
  .regex(TOKEN, { error: (issue) => `expected a header name, got ${show(issue.input)}` })

/** CORS answered by the gateway (see cors.ts). */
const cors = z.strictObject({
  /** Origins whose pages may read the answers, as browsers send them (`https://app.example.com`, no path), or "*" for any. */
  origins: z.array(z.string({ error: (issue) => `expected an origin, got ${show(issue.input)}` })
    .regex(/^(\*|https?:\/\/[^/\s?#@]+)$/, { error: (issue) => `expected an origin such as https://app.example.com (scheme and host, no path), or "*", got ${show(issue.input)}` }))
    .min(1, { error: 'expected at least one origin' }),
  /** Methods a page may send (a preflight for another is refused). */
  methods: z.array(z.string().regex(TOKEN, { error: (issue) => `expected a method, got ${show(issue.input)}` })).min(1).default(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE']),
  /** Request headers a page may send; "*" (the default): any. */
  headers: z.array(z.union([z.literal('*'), fieldName])).default(['*']),
  /** Response headers a page may read, besides the rate-limit fields and Retry-After (always exposed). */
  exposeHeaders: z.array(fieldName).default([]),
  /** Cookies and HTTP authentication go with the requests (needs named origins). */
  credentials: z.boolean().default(false),
  /** How long a browser may keep a preflight's answer. */
  maxAgeSeconds: z.number().int().min(0).max(86_400).default(600),
}).superRefine((value, context) => {
  if (value.credentials && value.origins.includes('*')) {
    context.addIssue({ code: 'custom', path: ['origins'], message: 'credentials need the origins named: browsers refuse "*" with credentials, and allowing every page to call with the user\'s cookies would let any site act as the user' })
  }
}).meta({ id: 'cors', description: 'CORS answered by the gateway: preflights answered here (never forwarded, never charged), every answer readable by pages on these origins, the rate-limit fields exposed. An upstream\'s own Access-Control-* fields are replaced.' })

const timeouts = z.strictObject({
  /** A client must send its request headers within this. */
  headersMs: milliseconds.default(10_000),
  /** A client must send its whole request within this. */
  requestMs: milliseconds.default(300_000),
  keepAliveMs: milliseconds.default(5_000),
  /** The upstream must answer (headers) within this: else 504. */
  upstreamMs: milliseconds.default(30_000),
  /** Longest silence while streaming a body from the upstream. */
  upstreamBodyMs: milliseconds.default(60_000),
  /** On SIGTERM, in-flight requests get this long to finish. */
  shutdownMs: milliseconds.default(10_000),
})

export const configSchema = z.strictObject({
  server: z.strictObject({
    listen: listen.default({ host: '127.0.0.1', port: 8080 }),
    tls: z.strictObject({
      cert: nonEmpty,
      key: nonEmpty,
      /** Offer HTTP/2 (ALPN `h2`) beside HTTP/1.1 on the same port. */
      http2: z.boolean().default(false),
    }).optional(),
    timeouts: timeouts.default(timeouts.parse({})),
  }).default({ listen: { host: '127.0.0.1', port: 8080 }, timeouts: timeouts.parse({}) }),
  admin: z.strictObject({
    listen: listen.default({ host: '127.0.0.1', port: 9090 }),
    /** Keys whose remaining quota `/status` shows, read without charging (e.g. `apikey:partner-1`). */
    watch: z.array(nonEmpty).default([]),
    /** `sluice_request_duration_seconds` by route (16 series each), or one histogram for every route (`route="*"`). */
    durationByRoute: z.boolean().default(true),
  }).default({ listen: { host: '127.0.0.1', port: 9090 }, watch: [], durationByRoute: true }),
  store: store.default({ type: 'memory' }),
  /** State key namespace, so several gateways can share one Redis. */
  prefix: z.string().regex(/^[\x21-\x7a\x7c\x7e]{1,48}$/, { error: (issue) => `expected 1 to 48 printable ASCII characters without spaces or braces, got ${show(issue.input)}` }).default('sluice'),
  identity: identity.default({}),
  tiers: tiers.optional(),
  headers: headerStyle.default({}),
  /** Every limit in shadow mode: decide, count and log, never refuse. */
  shadow: z.boolean().default(false),
  /**
   * Path patterns match case-insensitively by default: the gateway cannot know how its upstreams
   * route, and in front of one that routes /LOGIN as /login (Express's default, ASP.NET) a
   * case-sensitive /login limit could be walked around. true where case tells routes apart.
   */
  caseSensitive: z.boolean().default(false),
  cors: cors.optional(),
  /** Limits on every route, in addition to each route's own. */
  limits: z.array(limit).default([]),
  routes: z.array(route).min(1, { error: 'expected at least one route' }),
  logging: z.strictObject({
    level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    /** One line per request: route, key kind (never the key), decision, status, latency. */
    access: z.boolean().default(true),
  }).default({ level: 'info', access: true }),
})

export type RawConfig = z.output<typeof configSchema>
export type RouteConfig = RawConfig['routes'][number]
export type LimitConfig = RouteConfig['limits'][number]

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
}

/**
 * The parser's errors, one per line (a single slip in a flow collection makes
 * the parser report each token after it). In `{ }` and `[ ]`, `${NAME}`
 * unquoted is YAML syntax (`$` then a mapping), so a line with a reference says
 * how to write it.
 */
function yamlProblems(errors: ReadonlyArray<{ message: string; pos: [number, number] }>, text: string, lineOf: (offset: number) => number | undefined): string[] {
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
    const message = maskCredentials(error.message.split('\n')[0] as string)
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
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true })
  const lineOf = (offset: number | undefined) => (offset === undefined ? undefined : lineCounter.linePos(offset).line)
  if (doc.errors.length > 0) throw new ConfigError(file, yamlProblems(doc.errors, text, lineOf))
  const problems: string[] = []
  // A value whose variable is missing is reported once, for the variable, not again by the schema.
  const unset = new Set<string>()
  // Values as written where a reference was substituted: a problem found later (a port in use) can name the variable.
  const written = new Map<string, string>()
  substituteEnv(doc, env, (path, message, offset) => {
    unset.add(formatPath(path))
    problems.push(`${formatPath(path)}: ${message} (line ${lineOf(offset) ?? '?'})`)
  }, (path, raw) => written.set(formatPath(path), raw))
  const unreadable = shapeProblems(doc).map(({ problem, offset }) => `YAML: ${problem} (line ${lineOf(offset) ?? '?'})`)
  if (unreadable.length > 0) throw new ConfigError(file, unreadable)
  let data: unknown
  try {
    data = doc.toJS() ?? {}
  } catch (error) {
    // The yaml package's guard against alias expansion bombs ("billion laughs").
    throw new ConfigError(file, [`YAML: ${(error as Error).message}`])
  }
  // A file that is not a mapping of sections is the wrong file (a .env, a key, a list): say what it is, not what it holds,
  // which may be a secret bound for a CI log.
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    const what = Array.isArray(data) ? `a list of ${data.length} item${data.length === 1 ? '' : 's'}` : typeof data === 'string' ? `text (${data.length} characters, not shown)` : show(data)
    throw new ConfigError(file, [`(file): expected the config's sections (server, store, identity, limits, routes, ...), got ${what}: is it the right file?`])
  }
  const at = (path: readonly PropertyKey[]) => lineOf(nodeOffset(doc, path))
  const report = (path: readonly PropertyKey[], message: string) => {
    const line = at(path)
    problems.push(`${formatPath(path)}: ${message}${line === undefined ? '' : ` (line ${line})`}`)
  }
  const parsed = configSchema.safeParse(data, { reportInput: true, error: defaultMessage })
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      if (issue.code === 'unrecognized_keys') {
        for (const key of issue.keys) report([...issue.path, key], 'is not a known field')
      } else if (!unset.has(formatPath(issue.path))) {
        report(issue.path, issue.message)
      }
    }
    throw new ConfigError(file, problems)
  }
  if (problems.length > 0) throw new ConfigError(file, problems)
  const config = parsed.data
  // Files the config names are found beside it, wherever the gateway was started from (systemd starts it in /).
  const beside = (path: string) => resolve(dirname(file), path)
  const limitsResolved = resolveLimits(config, report)
  let tls: GatewayConfig['tls']
  if (config.server.tls !== undefined) {
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
  let jwtPublicKey = config.identity.jwt?.publicKey
  if (config.identity.jwt?.publicKeyFile !== undefined) {
    try {
      jwtPublicKey = readBounded(beside(config.identity.jwt.publicKeyFile)).toString('utf8')
    } catch (error) {
      report(['identity', 'jwt', 'publicKeyFile'], `cannot read: ${(error as Error).message}`)
    }
  }
  let apiKeys = config.identity.apiKey?.keys
  const keysFile = config.identity.apiKey?.keysFile
  if (keysFile !== undefined) {
    try {
      const listed = readBounded(beside(keysFile)).toString('utf8').split(/\r?\n/).map((line) => line.trim()).filter((line) => line !== '' && !line.startsWith('#'))
      if (listed.length === 0) report(['identity', 'apiKey', 'keysFile'], `lists no key (${keysFile}): every request would fall through to the next resolver`)
      else apiKeys = listed
    } catch (error) {
      report(['identity', 'apiKey', 'keysFile'], `cannot read: ${(error as Error).message}`)
    }
  }
  checkReferences(config, report)
  checkServer(config, report)
  checkStoreHolds(config, limitsResolved, report)
  const watch = watchedKeys(config, apiKeys, report)
  checkCompiles(config, jwtPublicKey, apiKeys, report)
  checkReachable(config, report)
  if (problems.length > 0) throw new ConfigError(file, problems)
  // Files the config names are part of it: a changed key file is a new version (and a reload takes it).
  const version = createHash('sha256').update(text).update(JSON.stringify([jwtPublicKey ?? null, apiKeys ?? null, tls?.cert.toString('base64') ?? null, tls?.key.toString('base64') ?? null])).digest('hex').slice(0, 12)
  const named = [config.server.tls?.cert, config.server.tls?.key, config.identity.jwt?.publicKeyFile, keysFile]
  const files = [resolve(file), ...named.filter((path) => path !== undefined).map(beside)]
  return { ...config, admin: { ...config.admin, watch }, file, version, files, limitsResolved, tls, jwtPublicKey, apiKeys, written }
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
    if (key === 'anonymous') return key
    if (key.startsWith('ip:')) {
      const normalized = canonicalKey(key, config.identity.clientIp?.ipv6Prefix)
      if (normalized !== undefined) return normalized
      report(['admin', 'watch', i], `${show(key)} holds no IP address (ip:203.0.113.7, ip:2001:db8::1)`)
      return key
    }
    report(['admin', 'watch', i], `${show(key)} is not a key the gateway makes: ip:<address>, apikey:<key>, user:<JWT claim> or anonymous`)
    return key
  })
}

type Report = (path: readonly PropertyKey[], message: string) => void

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

/** What a valid config may not mean to do: logged at start and reload, printed by check-config. */
export function configWarnings(config: GatewayConfig): string[] {
  const warnings: string[] = []
  if (config.identity.apiKey !== undefined && config.apiKeys === undefined) {
    warnings.push('identity.apiKey has no keys or keysFile: any value a client sends is an API key with a quota of its own, so a client can make up a new key per request. List the keys, or key the limits that stop abuse by ip.')
  }
  const tierFrom = config.tiers?.from
  const trustProxy = config.identity.clientIp?.trustProxy
  const trustsEveryone = everyAddressWarning(trustProxy, 'identity.clientIp.trustProxy')
  if (trustsEveryone !== undefined) warnings.push(trustsEveryone)
  const behindProxy = trustProxy !== undefined && trustProxy !== false && trustProxy !== 0 && !(Array.isArray(trustProxy) && trustProxy.length === 0)
  if (tierFrom !== undefined && 'header' in tierFrom && !behindProxy) {
    warnings.push(`tiers.from.header: clients reach this gateway directly (identity.clientIp.trustProxy is not set), so any client can choose its tier by sending ${tierFrom.header}. Take the tier from a verified claim (tiers.from.jwtClaim), or set trustProxy for the proxy that writes the header.`)
  }
  return warnings
}

/** Names every limit and policy, spells out Spring Cloud Gateway limits, and checks what spans limits. */
function resolveLimits(config: RawConfig, report: Report): ResolvedLimit[] {
  const resolved: ResolvedLimit[] = []
  const policyNames = new Map<string, string>()
  const limitNames = new Set<string>()
  const routeNames = new Set<string>()
  const duplicateRoutes = new Set<string>()
  config.routes.forEach((route, i) => {
    if (routeNames.has(route.name)) {
      report(['routes', i, 'name'], `${show(route.name)} names two routes`)
      duplicateRoutes.add(route.name)
    }
    routeNames.add(route.name)
  })
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
function checkReachable(config: RawConfig, report: Report): void {
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
    else if (narrowsWithKnownMethods(limit.match) && config.routes.length > 0 && !config.routes.some((route) => matchesMeet(route.match ?? {}, limit.match as MatchOptions, config.caseSensitive))) {
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
  const configured = new Set(['ip', ...(config.identity.jwt !== undefined ? ['jwt'] : []), ...(config.identity.apiKey !== undefined ? ['apiKey'] : [])])
  const check = (kinds: readonly string[] | undefined, path: PropertyKey[]) => {
    kinds?.forEach((kind, i) => {
      if (!configured.has(kind)) report([...path, i], `${show(kind)} is not configured under identity`)
      else if (kinds.indexOf(kind) < i) report([...path, i], `${show(kind)} is named twice`)
      // Every request has a client address: whatever comes after ip is never tried.
      else if (kind === 'ip' && i < kinds.length - 1) report([...path, i], `ip identifies every request, so ${kinds.slice(i + 1).join(', ')} after it would never be tried: put ip last`)
    })
  }
  check(config.identity.order, ['identity', 'order'])
  config.limits.forEach((limit, j) => check(limit.key, ['limits', j, 'key']))
  config.routes.forEach((route, i) => route.limits.forEach((limit, j) => check(limit.key, ['routes', i, 'limits', j, 'key'])))
  if (config.tiers !== undefined && 'jwtClaim' in config.tiers.from && config.identity.jwt === undefined) {
    report(['tiers', 'from', 'jwtClaim'], 'needs identity.jwt to verify the token the claim comes from')
  }
}

/**
 * Builds what the gateway builds from the file (match predicates, the client
 * IP resolver, the JWT verifier), so anything they refuse is a listed problem
 * here, with its line, rather than a failed start or reload.
 */
function checkCompiles(config: RawConfig, jwtPublicKey: string | undefined, apiKeys: string[] | undefined, report: Report): void {
  const attempt = (where: PropertyKey[], build: () => unknown, fieldOf: (argument: string) => string = (argument) => argument) => {
    try {
      build()
    } catch (error) {
      if (!(error instanceof ArgumentError)) throw error
      // An ArgumentError's message starts with its argument, a dotted path below `where`.
      report([...where, ...fieldOf(error.argument).split('.')], error.message.slice(error.argument.length + 1))
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

/**
 * `${NAME}` and `${NAME:-default}` in string values, replaced in place; a
 * default may hold references itself (`${A:-${B:-x}}`, as a shell and Compose
 * read it), and `$${` is a literal `${`. An unset variable without a default
 * is a problem, and so is a `${` that starts no reference: kept as written it
 * would become the value (a secret `${FALLBACK_SECRET}` anyone can read in the
 * file). Problems say where, never what: the string may be a secret.
 */
function substituteEnv(doc: Document, env: NodeJS.ProcessEnv, report: (path: PropertyKey[], message: string, offset: number | undefined) => void, substituted: (path: PropertyKey[], raw: string) => void): void {
  visit(doc, {
    Scalar(_key, node, ancestors) {
      if (typeof node.value !== 'string' || !node.value.includes('${')) return
      const path = pathOf(ancestors)
      substituted(path, node.value)
      const expanded = expand(node.value, 0, env, 0)
      for (const problem of [...expanded.malformed, ...expanded.unset]) report(path, problem, node.range?.[0])
      const { text } = expanded
      // A value that is nothing but one reference may stand for a number or a boolean (`port: ${PORT}`).
      if (expanded.whole && /^-?\d+$/.test(text)) node.value = Number(text)
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
function pathOf(ancestors: readonly unknown[]): PropertyKey[] {
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

/** The offset of the deepest node on `path` that exists (a missing field points at its parent). */
function nodeOffset(doc: Document, path: readonly PropertyKey[]): number | undefined {
  for (let length = path.length; length >= 0; length--) {
    const node = length === 0 ? doc.contents : doc.getIn(path.slice(0, length), true)
    const range = (node as { range?: [number, number, number] } | undefined)?.range
    if (range !== undefined) return range[0]
  }
  return undefined
}

/** `routes[2].limits[0].capacity` */
export function formatPath(path: readonly PropertyKey[]): string {
  if (path.length === 0) return '(file)'
  return path.map((part, i) => (typeof part === 'number' ? `[${part}]` : `${i === 0 ? '' : '.'}${String(part)}`)).join('')
}

/** Messages for issues the schema does not word itself. */
function defaultMessage(issue: z.core.$ZodRawIssue): string {
  switch (issue.code) {
    case 'invalid_type':
      return issue.input === undefined ? 'is required' : `expected ${issue.expected}, got ${show(issue.input)}`
    case 'invalid_value':
      return `expected ${issue.values.map((v) => String(v)).join(', ')}, got ${show(issue.input)}`
    case 'too_small':
      return issue.origin === 'array' ? `expected at least ${String(issue.minimum)} item${issue.minimum === 1 ? '' : 's'}` : `expected at least ${String(issue.minimum)}, got ${show(issue.input)}`
    case 'too_big':
      return `expected at most ${String(issue.maximum)}, got ${show(issue.input)}`
    case 'invalid_format':
      return `expected a ${issue.format}, got ${show(issue.input)}`
    default:
      return `invalid value ${show(issue.input)}`
  }
}

/** The JSON Schema of the file, for editor completion (written to schema/sluice.schema.json). */
export function configJsonSchema(): Record<string, unknown> {
  const schema = allowReferences(z.toJSONSchema(configSchema, { io: 'input', unrepresentable: 'any' })) as Record<string, unknown>
  return {
    ...schema,
    $defs: { ...(schema.$defs as object | undefined), envReference: REFERENCE_SCHEMA },
    $id: 'https://github.com/sluice/sluice/schema/sluice.schema.json',
    title: 'sluice gateway configuration',
  }
}

/** A string holding an `${ENV}` reference (not the `$${` escape): the editor sees it before it is substituted. */
const REFERENCE_SCHEMA = {
  type: 'string',
  pattern: '(^|[^$])\\$\\{[A-Za-z_]',
  description: 'an environment reference (${NAME} or ${NAME:-default}), checked once substituted',
}

/**
 * The editor reads the file as written, references unsubstituted: every value
 * that a string holding one would fail (a number, a boolean, a pattern, a
 * format, an enum) also takes one, as the gateway does (`capacity: "${CAP}"`,
 * `url: ${REDIS_URL}`). Constants stay as they are: they tell the shapes of a
 * union apart (a policy's `algorithm`, the store's `type`).
 */
function allowReferences(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(allowReferences)
  if (schema === null || typeof schema !== 'object') return schema
  const node = Object.fromEntries(Object.entries(schema).map(([key, value]) => [key, allowReferences(value)])) as Record<string, unknown>
  const types = [node.type].flat()
  const scalar = types.length > 0 && types.every((type) => type === 'string' || type === 'number' || type === 'integer' || type === 'boolean')
  const refusesReferences = !types.includes('string') || node.pattern !== undefined || node.format !== undefined || node.enum !== undefined
  if (!scalar || node.const !== undefined || !refusesReferences) return node
  const { description, default: fallback, ...rest } = node
  return { ...(description === undefined ? {} : { description }), ...(fallback === undefined ? {} : { default: fallback }), anyOf: [rest, { $ref: '#/$defs/envReference' }] }
}
