/**
 * The gateway file's shape: the zod schema every file is checked against, the
 * words of its problems (never a secret's value), and the JSON Schema editors
 * complete from (scripts/write-schema.ts). What the schema cannot say (names
 * that must agree, routes that can never match, policies that cannot work) is
 * checked in config.ts.
 */
import { z } from 'zod'
import safeRegex from 'safe-regex2'
import { maskCredentials } from '../core/errors.ts'
import { withHint } from '../core/suggest.ts'
import { OPTIONAL_POLICY_FIELDS, POLICY_CHOICES, POLICY_FIELD_NAMES, POLICY_FIELDS, policyProblems } from '../core/policy.ts'
import { TOKEN } from '../http/match.ts'
import { redisUrlProblem } from '../stores/redis/url.ts'

/**
 * A value in a problem, cut short (a file given by mistake, a key list or a
 * certificate, is not echoed into logs) and with any URL's credentials masked
 * (`redis://***@host`): check-config runs in CI logs.
 */
export const show = (value: unknown): string => {
  // A `!!binary` value: bytes, whose JSON would be a list of numbers.
  if (value instanceof Uint8Array) return `binary data (!!binary, ${value.byteLength} bytes)`
  const text = maskCredentials(value === undefined ? 'nothing' : JSON.stringify(value) ?? String(value))
  return text.length > 80 ? `${text.slice(0, 60)}... (${text.length} characters)` : text
}

/** A policy's name in a problem: no secret, and a derived one (`token-bucket:5@1/1s`) is no URL's credentials to mask. */
export const policyName = (name: string): string => JSON.stringify(name)

/** What a value is, for problems with fields whose values are secrets: never the value itself. */
const kindOf = (value: unknown): string =>
  value === null ? 'null' : Array.isArray(value) ? 'a list' : typeof value === 'object' ? 'an object' : `a ${typeof value} (not shown: a secret)`

/** A password, a shared secret, an API key: its problems say what it should be, never what it is. */
const secret = (mayBeEmpty: boolean) => {
  const text = z.string({ error: (issue) => `expected a${mayBeEmpty ? '' : ' non-empty'} string, got ${kindOf(issue.input)}` })
  return mayBeEmpty ? text : text.min(1, { error: 'expected a non-empty string' })
}

const positiveInt = (what = 'a positive integer', hint: (input: unknown) => string | undefined = () => undefined) => {
  const error = (issue: { input?: unknown }) => withHint(`expected ${what}, got ${show(issue.input)}`, hint(issue.input))
  return z.number({ error }).int({ error }).positive({ error }).max(Number.MAX_SAFE_INTEGER)
}

/**
 * For a replenishRate that is not whole requests a second (Spring Cloud Gateway cannot go under one a
 * second either, its issue #87): the token bucket it stands for, which can.
 */
function tokenBucketHint(rate: unknown): string | undefined {
  if (typeof rate !== 'number' || !(rate > 0) || Number.isInteger(rate) || !Number.isFinite(rate)) return undefined
  // The fewest whole seconds in which the rate brings whole tokens: 0.5 a second is 1 every 2 s.
  const seconds = Array.from({ length: 1000 }, (_, i) => i + 1).find((n) => Math.abs(rate * n - Math.round(rate * n)) < 1e-9)
  const refill = seconds === undefined ? 'refillTokens: <tokens>, refillIntervalMs: <ms in which they come>' : `refillTokens: ${Math.round(rate * seconds)}, refillIntervalMs: ${seconds * 1000}`
  return `write the token bucket it stands for, which takes any rate: policies: { algorithm: token-bucket, capacity: <burstCapacity>, ${refill} }`
}
const milliseconds = positiveInt('a positive number of milliseconds').max(2 ** 31 - 1, { error: (issue) => `expected at most 2147483647 ms, got ${show(issue.input)}` })
const nonEmpty = z.string({ error: (issue) => `expected a non-empty string, got ${show(issue.input)}` }).min(1, { error: 'expected a non-empty string' })
const stringOrList = z.union([nonEmpty, z.array(nonEmpty).min(1)], { error: (issue) => `expected a string or a list of strings, got ${show(issue.input)}` })
/** A route's or a limit's name. */
export const nameSchema = z.string({ error: (issue) => `expected a name, got ${show(issue.input)}` })
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, { error: (issue) => `expected 1 to 64 letters, digits, ".", "_" or "-", got ${show(issue.input)}` })
const name = nameSchema

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
 * rules (`policyProblems`: resolvePolicy's, every problem listed).
 */
const policy = z.record(z.string(), z.unknown(), { error: (issue) => `expected a policy (an object with "algorithm"), got ${show(issue.input)}` })
  .superRefine((raw, context) => {
    for (const error of policyProblems(raw)) {
      const path = error.field === 'policy' ? [] : [error.field]
      // The field leads the message, and the issue's path names it already (it may be any key the file holds: no pattern of it).
      const message = error.message.replace(/^policy "[^"]*": /, '')
      context.addIssue({ code: 'custom', path, message: message.startsWith(`${error.field} `) ? message.slice(error.field.length + 1) : message })
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
          POLICY_CHOICES[field] !== undefined ? { enum: [...POLICY_CHOICES[field]] } : { type: 'integer', exclusiveMinimum: 0 }])),
      },
    })),
  })
const policies = z.union([z.array(policy).min(1, { error: 'expected at least one policy' }), policy], { error: (issue) => `expected a policy or a list of policies, got ${show(issue.input)}` })

/** Who a request is: a verified token's claim, an API key, the client IP, or one client that every request is (a quota all share). */
const identityKinds = z.enum(['jwt', 'apiKey', 'ip', 'everyone'], { error: (issue) => `expected one of jwt, apiKey, ip, everyone, got ${show(issue.input)}` })
export type IdentityKind = z.infer<typeof identityKinds>

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
  replenishRate: positiveInt('a positive integer (requests a second)', tokenBucketHint).optional(),
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
export const SCG_FIELDS: Record<string, string | undefined> = { capacity: 'burstCapacity', refillTokens: 'replenishRate' }

const upstreamUrl = z.string({ error: (issue) => `expected an http:// or https:// URL, got ${show(issue.input)}` }).superRefine((value, context) => {
  let url: URL | undefined
  try {
    url = new URL(value)
  } catch { /* reported below */ }
  const problem = url === undefined ? 'which is not a valid URL (a port from 1 to 65535, a host without spaces)'
    : url.protocol !== 'http:' && url.protocol !== 'https:' ? undefined
      : url.username !== '' || url.password !== '' ? 'with credentials, which the gateway does not send: an upstream is a base URL'
        : url.search !== '' || url.hash !== '' ? 'with a query or fragment: an upstream is a base URL, to which each request\'s own path and query are added'
          : ''
  if (problem !== '') context.addIssue({ code: 'custom', message: `expected an http:// or https:// URL, got ${show(value)}${problem === undefined ? '' : `, ${problem}`}` })
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

const REDIS_SCHEME = /^rediss?:\/\//

/** A Redis node's address, `shape` capturing its port, which must be one a socket can connect to. */
function redisNode(shape: RegExp, expected: string) {
  const error = (issue: { input: unknown }) => `expected ${expected} (a port from 1 to 65535), got ${show(issue.input)}`
  return z.string().regex(shape, { error }).refine((value) => {
    const port = Number(shape.exec(value)?.at(-1) ?? 1)
    return port >= 1 && port <= 65535
  }, { error })
}

const redisOptions = {
  url: z.string().regex(REDIS_SCHEME, { error: (issue) => `expected a redis:// or rediss:// URL, got ${show(issue.input)}` }).superRefine((value, context) => {
    const problem = REDIS_SCHEME.test(value) ? redisUrlProblem(value) : undefined
    if (problem !== undefined) context.addIssue({ code: 'custom', message: `${problem} (got ${show(value)})` })
  }).optional(),
  cluster: z.array(redisNode(/^(rediss?:\/\/)?[^\s/]+:(\d+)$/, 'host:port or redis://host:port')).min(1).optional(),
  sentinel: z.strictObject({
    sentinels: z.array(redisNode(/^[^\s/]+:(\d+)$/, 'host:port')).min(1),
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
    /**
     * The keys that exist; another value is no identity. Without keys (or keysFile) any value is a key.
     * Each may be followed by its tier (`k-1 pro`), which `tiers.from: apiKey` reads.
     */
    keys: z.array(secret(false)).min(1).optional(),
    /** A file of keys, one per line, each alone or followed by its tier (`#` comments, blank lines ignored), read at start and on reload. */
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
  from: z.union([z.strictObject({ jwtClaim: nonEmpty }), z.strictObject({ header: nonEmpty }), z.literal('apiKey')], { error: 'expected { jwtClaim: <claim> }, { header: <name> } or apiKey (the tier the API key is listed with)' }),
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

const connections = z.strictObject({
  /** Connections open at once; one more is closed as it comes, unanswered. */
  max: positiveInt().optional(),
  /** Connections one client may have open at once, counted by the address its key is (an IPv6 client's network); a trusted proxy's are not counted. */
  perClient: positiveInt().optional(),
}).meta({ id: 'connections', description: 'Caps on open connections, as nginx\'s limit_conn: a client holding many idle connections would take the file descriptors every client needs. A connection over a cap is closed as it comes, unanswered. Applied to connections opened after a reload.' })

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
    connections: connections.optional(),
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
    /** Log bytes held while stdout takes none (a stalled log reader); lines beyond are dropped, and counted. */
    bufferBytes: z.number({ error: (issue) => `expected a number of bytes, got ${show(issue.input)}` }).int({ error: (issue) => `expected a whole number of bytes, got ${show(issue.input)}` })
      .min(65_536, { error: (issue) => `expected at least 65536 bytes (64 KiB), got ${show(issue.input)}` }).max(2 ** 31 - 1, { error: (issue) => `expected at most 2147483647 bytes, got ${show(issue.input)}` }).default(16 * 1024 * 1024),
  }).default({ level: 'info', access: true, bufferBytes: 16 * 1024 * 1024 }),
})

export type RawConfig = z.output<typeof configSchema>
export type RouteConfig = RawConfig['routes'][number]
export type LimitConfig = RouteConfig['limits'][number]

/** Messages for issues the schema does not word itself. */
export function defaultMessage(issue: z.core.$ZodRawIssue): string {
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
    patternProperties: { '^x-': { description: 'the file\'s own, ignored by the gateway: a place for anchors (x-policy: &policy {...}) to merge (<<: *policy) or refer to' } },
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

/** The schema's zod definition: only what `fieldsAt` walks through. */
interface SchemaDefinition {
  type: string
  shape?: Record<string, unknown>
  innerType?: unknown
  in?: unknown
  options?: unknown[]
  element?: unknown
  valueType?: unknown
  getter?: () => unknown
}

/**
 * The fields the config may have at `path` (every shape a union allows there),
 * read off the schema itself, so that an unknown field's message can say which
 * one was meant. A path the schema has no object at gives none.
 */
export function fieldsAt(path: readonly PropertyKey[]): string[] {
  return [...new Set(schemasAt(configSchema, path).flatMap((schema) => {
    const definition = definitionOf(schema)
    return definition.type === 'object' ? Object.keys(definition.shape ?? {}) : []
  }))]
}

/**
 * Where in the config `field` is one (`server`, `routes[].match`, `''` for
 * the top level), for a field written at the wrong level: `admin` under
 * `server`, `timeouts` at the top. In the schema's order.
 */
export function placesOf(field: string): readonly string[] {
  fieldPlaces ??= placesOfEveryField()
  return fieldPlaces.get(field) ?? []
}

let fieldPlaces: Map<string, string[]> | undefined

function placesOfEveryField(): Map<string, string[]> {
  const places = new Map<string, string[]>()
  const walk = (schema: unknown, path: string, within: readonly unknown[]): void => {
    // A schema within itself (a lazy one) is not walked again: its places are those already found.
    if (within.includes(schema) || within.length > 16) return
    const inner = [...within, schema]
    for (const shape of unwrapped(schema)) {
      const definition = definitionOf(shape)
      if (definition.type === 'array') walk(definition.element, `${path}[]`, inner)
      else if (definition.type === 'record') walk(definition.valueType, `${path}.*`, inner)
      else if (definition.type === 'object') {
        for (const [name, field] of Object.entries(definition.shape ?? {})) {
          const known = places.get(name) ?? []
          if (!known.includes(path)) places.set(name, [...known, path])
          walk(field, path === '' ? name : `${path}.${name}`, inner)
        }
      }
    }
  }
  walk(configSchema, '', [])
  // A policy is checked as the engine checks it, not by the schema: its fields are those of `policies`.
  const policyPlaces = (places.get('policies') ?? []).map((place) => `${place}.policies`)
  for (const name of POLICY_FIELD_NAMES) places.set(name, [...(places.get(name) ?? []), ...policyPlaces])
  return places
}

/** For a number or true/false where text goes (`name: 2024`, `password: 12345`: YAML reads them so), to quote it. */
export function quoteHint(path: readonly PropertyKey[], input: unknown): string | undefined {
  if (typeof input !== 'number' && typeof input !== 'boolean') return undefined
  const types = schemasAt(configSchema, path).map((schema) => definitionOf(schema).type)
  if (!types.includes('string') || types.includes('number') || types.includes('boolean')) return undefined
  return `quote it, as text ("…"): YAML reads it as a ${typeof input}`
}

/** Whether the value at `path` can only be text (a password, a header name): a reference there that reads as a number is text all the same. */
export function takesOnlyText(path: readonly PropertyKey[]): boolean {
  const schemas = schemasAt(configSchema, path)
  return schemas.length > 0 && schemas.every((schema) => definitionOf(schema).type === 'string')
}

function definitionOf(schema: unknown): SchemaDefinition {
  return (schema as { _zod: { def: SchemaDefinition } })._zod.def
}

function schemasAt(schema: unknown, path: readonly PropertyKey[]): unknown[] {
  if (path.length === 0) return unwrapped(schema)
  const [head, ...rest] = path
  return unwrapped(schema).flatMap((shape) => {
    const definition = definitionOf(shape)
    if (definition.type === 'object') {
      const field = definition.shape?.[String(head)]
      return field === undefined ? [] : schemasAt(field, rest)
    }
    if (definition.type === 'array') return schemasAt(definition.element, rest)
    if (definition.type === 'record') return schemasAt(definition.valueType, rest)
    return []
  })
}

/** The schemas a value may meet where `schema` stands: its wrappers (optional, default, pipe, lazy) gone, a union's options each. */
function unwrapped(schema: unknown): unknown[] {
  const definition = definitionOf(schema)
  switch (definition.type) {
    case 'optional': case 'nullable': case 'default': case 'prefault': case 'readonly': case 'catch': case 'nonoptional':
      return unwrapped(definition.innerType)
    case 'pipe':
      return unwrapped(definition.in)
    case 'lazy':
      return unwrapped(definition.getter?.())
    case 'union':
      return (definition.options ?? []).flatMap(unwrapped)
  }
  return [schema]
}
