import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createServer, type AddressInfo } from 'node:net'
import { describe, it } from 'node:test'
import { Ajv2020 } from 'ajv/dist/2020.js'
import { exportSPKI, generateKeyPair } from 'jose'
import fc from 'fast-check'
import { parse, stringify } from 'yaml'
import { maskCredentials } from '../../src/core/errors.ts'
import { fcOptions, turnsOfEventLoopDuring } from '../helpers.ts'
import { seededRandom } from '../../src/simulate/traffic.ts'
import { ConfigError, configFromParts, configInParts, configWarnings, loadConfig, loadConfigOffThread, parseConfig } from '../../src/gateway/config.ts'
import { configJsonSchema } from '../../src/gateway/config-schema.ts'
import { runCli } from '../support/gateway.ts'
import { resolvePolicies, type Policy } from '../../src/index.ts'
import { matchCovers, type MatchOptions } from '../../src/http/match.ts'

const example = new URL('../../examples/sluice.yaml', import.meta.url).pathname
const minimal = (limits: string, extra = '') => `
${extra}
routes:
  - name: api
    upstream: http://127.0.0.1:9
    limits:
${limits}
`

async function problems(text: string, env: NodeJS.ProcessEnv = {}): Promise<string[]> {
  try {
    await parseConfig(text, 'test.yaml', env)
  } catch (error) {
    if (error instanceof ConfigError) return [...error.problems]
    throw error
  }
  return []
}

/** Runs `body` with a fresh temporary directory, removed afterwards. */
async function inTempDir(body: (dir: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-config-'))
  try {
    await body(dir)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

describe('gateway config', () => {
  it('the example config is valid', async () => {
    const config = await parseConfig(readFileSync(example, 'utf8'), example, {})
    assert.deepEqual(config.routes.map((r) => r.name), ['api', 'login', 'static'])
    assert.deepEqual(config.server.listen, { host: '127.0.0.1', port: 8080 })
  })

  it('any value or key put anywhere in a valid file is taken or refused as a problem of the file, never a crash', async () => {
    // A field named "[" once reached a RegExp and threw a SyntaxError out of the check.
    const base = parse(readFileSync(example, 'utf8')) as unknown
    const paths = (value: unknown, at: PropertyKey[] = [], out: PropertyKey[][] = []): PropertyKey[][] => {
      out.push(at)
      if (typeof value === 'object' && value !== null) for (const [key, inner] of Object.entries(value)) paths(inner, [...at, Array.isArray(value) ? Number(key) : key], out)
      return out
    }
    const odd = fc.oneof(fc.constantFrom(null, -1, 0, 0.5, 1e308, '', 'x', [], {}, true, '[', '(a+)+$', '__proto__', '${UNSET}', 'redis://h:1/x', '10.0.0.0/33', '/**'), fc.string({ maxLength: 8 }), fc.integer())
    const edit = fc.tuple(fc.nat(), odd, fc.boolean())
    await fc.assert(fc.asyncProperty(fc.array(edit, { minLength: 1, maxLength: 3 }), async (edits) => {
      const doc = structuredClone(base) as Record<PropertyKey, unknown>
      for (const [pick, value, asKey] of edits) {
        const all = paths(doc).filter((path) => path.length > 0)
        const path = all[pick % all.length] as PropertyKey[]
        const parent = path.slice(0, -1).reduce<Record<PropertyKey, unknown>>((node, key) => node[key] as Record<PropertyKey, unknown>, doc)
        const last = path[path.length - 1] as PropertyKey
        // As a key: the value (a string) names the field instead; else it replaces the value.
        if (asKey && typeof value === 'string' && !Array.isArray(parent)) {
          parent[value] = parent[last]
          delete parent[last]
        } else parent[last] = structuredClone(value)
      }
      try {
        await parseConfig(stringify(doc), 'mutated.yaml', {})
      } catch (error) {
        assert.ok(error instanceof ConfigError, `not a ConfigError: ${String(error)}\n${stringify(doc)}`)
        assert.doesNotMatch(error.message, /\[object |undefined\)/)
      }
    }), fcOptions(300))
  })

  it('lists every problem of a policy, not only its first: each field judged on its own; a misspelt field is not also missing', async () => {
    const text = minimal(`      - policies:
          - algorithm: token-bucket
            capacity: 1_000
            refillTokens: 0
            refilIntervalMs: 1000
            refill: later
            name: "a b"`)
    assert.deepEqual(await problems(text), [
      'routes[0].limits[0].policies[0].capacity: must be a finite number (got "1_000"); write it as a number, without separators: 1000 (line 9)',
      'routes[0].limits[0].policies[0].refillTokens: must be a positive integer (got 0) (line 10)',
      'routes[0].limits[0].policies[0].refilIntervalMs: is not a field of a token-bucket policy (fields: capacity, refillTokens, refillIntervalMs, refill, blockMs, name) (got 1000); did you mean "refillIntervalMs"? (line 11)',
      'routes[0].limits[0].policies[0].refill: must be one of greedy, interval (got "later") (line 12)',
      'routes[0].limits[0].policies[0].name: must be 1 to 64 printable ASCII characters without spaces (got "a b") (line 13)',
    ])
    // Fields right each on their own and wrong together: that problem, as before.
    assert.deepEqual(await problems(minimal('      - policies: { algorithm: token-bucket, capacity: 9007199254740991, refillTokens: 1, refillIntervalMs: 1000 }')), [
      'routes[0].limits[0].policies.capacity: is too large: capacity x refillIntervalMs (1000) must stay below 2^53 for exact arithmetic (got 9007199254740991) (line 7)',
    ])
  })

  it('lists every problem with its YAML path and line', async () => {
    const text = `server:
  listen: 127.0.0.1:99999
  bogus: 1
store:
  type: redis
routes:
  - name: api
    upstream: ftp://x
    limits:
      - policies:
          - algorithm: token-bucket
            capacity: -5
            refillTokens: 1
            refillIntervalMs: 1000
          - { algorithm: leaky, capacity: 5 }
      - replenishRate: 0
        burstCapacity: 2
  - name: moved
    upstream: http://127.0.0.1:8081
    headers: { standard: draft-99 }
`
    assert.deepEqual(await problems(text), [
      'server.listen: expected "host:port" or a port number, got "127.0.0.1:99999" (line 2)',
      'server.bogus: is not a known field (line 3)',
      'store: needs exactly one of url, cluster or sentinel (line 5)',
      'routes[0].upstream: expected an http:// or https:// URL, got "ftp://x" (line 8)',
      'routes[0].limits[0].policies[0].capacity: must be a positive integer (got -5) (line 12)',
      'routes[0].limits[0].policies[1].algorithm: must be one of fixed-window, sliding-log, sliding-window, token-bucket, leaky-bucket (got "leaky"); did you mean "leaky-bucket"? (line 15)',
      'routes[0].limits[1].replenishRate: expected a positive integer (requests a second), got 0 (line 16)',
      'routes[1].headers.standard: expected draft-10, draft-8, draft-7, draft-6 or false, got "draft-99" (line 20)',
    ])
  })

  it('lists what holds across the file (names, references, routes that can never match) with the fields that are wrong, in one run, at their own paths', async () => {
    const text = `admin:
  listen: 127.0.0.1:8080
server:
  listen: 127.0.0.1:8080
identity:
  order: [jwt, ip]
limits:
  - { name: broken, policies: [{ algorithm: fixed-window, limit: 0, windowMs: 1000 }] }
  - { name: nowhere, match: { path: /nowhere/** }, policies: [{ algorithm: fixed-window, name: g, limit: 5, windowMs: 1000 }] }
routes:
  - name: a
    match: { path: /a/** }
    upstream: ftp://127.0.0.1:1
  - name: b
    match: { path: /b }
    upstream: http://127.0.0.1:1
  - name: b
    match: { path: api }
    upstream: http://127.0.0.1:1
  - name: c
    match: { path: /d/** }
    upstream: http://127.0.0.1:1
    limits:
      - policies: [{ algorithm: fixed-window, name: g, limit: 5, windowMs: 1000 }]
  - name: d
    match: { path: /d }
    upstream: http://127.0.0.1:1
`
    assert.deepEqual(await problems(text), [
      // In the order of the file, whichever check found them; the checks across the file ran without routes[0] and
      // limits[0], and name what they found where the file has it.
      'admin.listen: is server.listen\'s port (8080): give the admin listener one of its own (line 2)',
      'identity.order[0]: "jwt" is not configured under identity (line 6)',
      'limits[0].policies[0].limit: must be a positive integer (got 0) (line 8)',
      'routes[0].upstream: expected an http:// or https:// URL, got "ftp://127.0.0.1:1" (line 13)',
      'routes[2].name: "b" names two routes (line 17)',
      'routes[2].match.path: must be path patterns starting with "/" (got "api") (line 18)',
      'routes[3].limits[0].policies[0]: policy name "g" is also used by limits[1].policies[0]; give each policy its own name (it keys the state and the headers) (line 24)',
      'routes[4].match: can never match: routes[3] ("c") comes first and takes every request this route would; move this route above it, or narrow that one (line 26)',
    ])
    // What only the whole file can show is said of the whole file: that no route takes /nowhere/** (without routes[0], it might have).
    assert.ok((await problems(text.replace('ftp:', 'http:').replace('limit: 0', 'limit: 1'))).some((problem) => problem.startsWith('limits[1].match: no route takes')))
    // A section with a wrong field is checked as its default: the checks that read it keep quiet, so as not to make a
    // problem up (here that jwt is not configured, said of a jwt section that is only wrong); the others still speak.
    const withBadJwt = await problems(text.replace('order: [jwt, ip]', 'order: [jwt, ip]\n  jwt: { secret: 5 }'))
    assert.deepEqual(withBadJwt.filter((problem) => problem.startsWith('identity.')), [
      'identity.jwt.algorithms: is required (line 7)',
      'identity.jwt.secret: expected a non-empty string, got a number (not shown: a secret); quote it, as text ("…"): YAML reads it as a number (line 7)',
    ])
    assert.equal(withBadJwt.length, 9)
    assert.ok(withBadJwt.includes("admin.listen: is server.listen's port (8080): give the admin listener one of its own (line 2)"))
    assert.ok(withBadJwt.includes('routes[2].name: "b" names two routes (line 18)'))
    // A route left out of the checks across the file for a problem of its own still has its name: a second route of that name is told.
    const withBadFirstB = await problems(text.replace('match: { path: /b }\n    upstream: http://127.0.0.1:1', 'match: { path: /b }\n    upstream: ftp://127.0.0.1:2'))
    assert.deepEqual(withBadFirstB.filter((problem) => problem.startsWith('routes[1]') || problem.startsWith('routes[2]')), [
      'routes[1].upstream: expected an http:// or https:// URL, got "ftp://127.0.0.1:2" (line 16)',
      'routes[2].name: "b" names two routes (line 17)',
      'routes[2].match.path: must be path patterns starting with "/" (got "api") (line 18)',
    ])
  })

  it('an unknown field says which known one it most likely is, from the fields the schema allows where it stands', async () => {
    const text = `
server:
  listen: 127.0.0.1:0
  timeout: { upstreamMs: 100 }
stor: { type: memory }
identity:
  apikey: { header: x-api-key }
  clientIp: { trustProxies: [10.0.0.0/8] }
routes:
  - name: api
    matches: { path: /api/** }
    upstream: http://127.0.0.1:8081
    limits:
      - policies: { algorithm: fixed-window, limit: 5, windowMS: 1000 }
      - replenishrate: 5
        burstCapacity: 10
      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }
        nonsense: 1
`
    assert.deepEqual((await problems(text)).sort(), [
      'identity.apikey: is not a known field; did you mean "apiKey"? (line 7)',
      'identity.clientIp.trustProxies: is not a known field; did you mean "trustProxy"? (line 8)',
      'routes[0].limits[0].policies.windowMS: is not a field of a fixed-window policy (fields: limit, windowMs, blockMs, name) (got 1000); did you mean "windowMs"? (line 14)',
      'routes[0].limits[1].replenishRate: is required with Spring Cloud Gateway limits (line 15)',
      'routes[0].limits[1].replenishrate: is not a known field; did you mean "replenishRate"? (line 15)',
      'routes[0].limits[2].nonsense: is not a known field (line 18)',
      'routes[0].matches: is not a known field; did you mean "match"? (line 11)',
      'server.timeout: is not a known field; did you mean "timeouts"? (line 4)',
      'stor: is not a known field; did you mean "store"? (line 5)',
    ])
  })

  it('a field named as another gateway or limiter names it says which of ours it is', async () => {
    const text = `
server:
  listen: 127.0.0.1:0
  connections: { perIp: 100 }
routes:
  - name: api
    uri: http://127.0.0.1:8081
    limits:
      - policies: { algorithm: fixed-window, points: 5, duration: 60 }
`
    assert.deepEqual((await problems(text)).filter((problem) => !problem.includes('required') && !problem.includes('got nothing')), [
      'server.connections.perIp: is not a known field; did you mean "perClient"? (line 4)',
      'routes[0].uri: is not a known field; did you mean "upstream"? (line 7)',
      "routes[0].limits[0].policies.points: is not a field of a fixed-window policy (fields: limit, windowMs, blockMs, name) (got 5); rate-limiter-flexible's points is limit here (line 9)",
      "routes[0].limits[0].policies.duration: is not a field of a fixed-window policy (fields: limit, windowMs, blockMs, name) (got 60); rate-limiter-flexible's duration is windowMs here, in milliseconds, where duration is seconds (line 9)",
    ])
  })

  it('a field written at another level than its own says where it goes', async () => {
    const text = `
server:
  listen: 127.0.0.1:0
  admin: { listen: 127.0.0.1:0 }
timeouts: { upstreamMs: 100 }
jwt: { secret: s }
routes:
  - name: api
    path: /api/**
    match: { path: /api/**, upstream: http://127.0.0.1:8082 }
    upstream: http://127.0.0.1:8081
    limits:
      - algorithm: fixed-window
        policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }
`
    assert.deepEqual((await problems(text)).sort(), [
      'jwt: is not a known field; jwt is a field of identity (line 6)',
      'routes[0].limits[0].algorithm: is not a known field; algorithm is a field of routes[].limits[].policies (line 13)',
      'routes[0].match.upstream: is not a known field; upstream is a field of routes[] (line 10)',
      'routes[0].path: is not a known field; path is a field of routes[].match or routes[].healthCheck (line 9)',
      'server.admin: is not a known field; admin is a field of the top level (line 4)',
      'timeouts: is not a known field; timeouts is a field of server (line 5)',
    ])
  })

  it('a policy field named with regular-expression syntax, or a policy without its algorithm, is a problem of the file, not a crash', async () => {
    const text = `
routes:
  - name: api
    match: { path: /api/** }
    upstream: http://127.0.0.1:8081
    limits:
      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000, "[": 1, "(a+)+$": 2 }
      - policies: { limit: 5, windowMs: 1000 }
`
    assert.deepEqual(await problems(text), [
      'routes[0].limits[0].policies.[: is not a field of a fixed-window policy (fields: limit, windowMs, blockMs, name) (got 1) (line 7)',
      'routes[0].limits[0].policies.(a+)+$: is not a field of a fixed-window policy (fields: limit, windowMs, blockMs, name) (got 2) (line 7)',
      'routes[0].limits[1].policies.algorithm: is required: one of fixed-window, sliding-log, sliding-window, token-bucket, leaky-bucket (line 8)',
    ])
  })

  it('a value that must be one of a few, misspelt, says which it most likely is: in a zod enum, a union of them, or a policy', async () => {
    const text = `
store: { type: memory }
headers: { standard: draft10 }
logging: { level: warning }
routes:
  - name: api
    upstream: http://127.0.0.1:8081
    limits:
      - policies: { algorithm: token-bucket, capacity: 5, refillTokens: 1, refillIntervalMs: 1000, refill: Greedy }
        action: queued
        maxWaitMs: 100
`
    assert.deepEqual(await problems(text), [
      'headers.standard: expected draft-10, draft-8, draft-7, draft-6 or false, got "draft10"; did you mean "draft-10"? (line 3)',
      'logging.level: expected fatal, error, warn, info, debug, trace, silent, got "warning" (line 4)',
      'routes[0].limits[0].policies.refill: must be one of greedy, interval (got "Greedy"); did you mean "greedy"? (line 9)',
      'routes[0].limits[0].action: expected reject or queue, got "queued"; did you mean "queue"? (line 10)',
    ])
  })

  it('a wrong file (keys, a certificate, a .env) is described in a problem, never quoted, so it does not land in logs', async () => {
    const secret = `sk_live_${'x'.repeat(200)}`
    assert.deepEqual(await problems(`${secret}\n`), [`(file): expected the config's sections (server, store, identity, limits, routes, ...), got text (${secret.length} characters, not shown): is it the right file?`])
    // A .env's lines read as one plain YAML scalar; an AWS secret key is 40 characters, all of which a 60-character quote showed.
    const [problem] = await problems('AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\nDB_PASSWORD=hunter2\n')
    assert.ok(!/wJalr|hunter2/.test(problem ?? ''), problem)
    assert.deepEqual(await problems('- sk_live_1\n- sk_live_2\n'), ["(file): expected the config's sections (server, store, identity, limits, routes, ...), got a list of 2 items: is it the right file?"])
    // A password file's lines end in `:`: YAML reads each as a field, named by the whole line, hash and all.
    const hash = '$6$Kx8mRsalt$Zq0w9PqY1bT7hashedpasswordhashedpasswordhashedpassword'
    assert.deepEqual(await problems(`root:${hash}:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n`), [
      'routes: is required (line 1)',
      `<a name of ${`root:${hash}:19000:0:99999:7::`.length} characters, not shown>: is not a known field: is it the right file? (line 1)`,
      '<a name of 26 characters, not shown>: is not a known field: is it the right file? (line 2)',
    ])
    // A misspelt field is still named, with what it may have meant.
    assert.deepEqual(await problems('routs: []\n'), ['routes: is required (line 1)', 'routs: is not a known field; did you mean "routes"? (line 1)'])
  })

  it('sluice check-config answers for a large wrong file (one long line) rather than hang: masking credentials takes linear time', async () => {
    // A regular expression took minutes on this (it backtracked over the run of letters from every start);
    // runCli gives up after 20 s.
    await inTempDir(async (dir) => {
      writeFileSync(join(dir, 'sluice.yaml'), `${'a'.repeat(300_000)}\n`)
      const { code, stderr } = await runCli(['check-config', join(dir, 'sluice.yaml')])
      assert.equal(code, 1)
      assert.match(stderr, /\(file\): expected the config's sections \(server, store, identity, limits, routes, \.\.\.\), got text \(300000 characters, not shown\): is it the right file\?/)
    })
  })

  it('refuses a file larger than 64 MiB, or one that never ends, rather than read it into memory', async () => {
    await inTempDir(async (dir) => {
      const large = join(dir, 'sluice.yaml')
      writeFileSync(large, Buffer.alloc(64 * 1024 * 1024 + 1, 0x61))
      await assert.rejects(loadConfig(large, {}), (error: ConfigError) => error.problems.join() === 'cannot read the file: larger than 64 MiB: is it the right file?')
      await assert.rejects(loadConfig('/dev/zero', {}), (error: ConfigError) => error.problems.join() === 'cannot read the file: larger than 64 MiB: is it the right file?')
      const keysFromDevice = minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }', 'identity:\n  apiKey: { keysFile: /dev/zero }')
      assert.deepEqual(await problems(keysFromDevice), ['identity.apiKey.keysFile: cannot read: larger than 64 MiB: is it the right file? (line 3)'])
      // A device of a config's size is read to its end.
      assert.deepEqual(await problems(minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }', 'identity:\n  apiKey: { keysFile: /dev/null }')), [
        'identity.apiKey.keysFile: lists no key (/dev/null): every request would fall through to the next resolver (line 3)',
      ])
    })
  })

  it('a binary file is named as one, and noise the parser cannot read is listed short: 20 lines, each quoting a few characters', async () => {
    await inTempDir(async (dir) => {
      const random = seededRandom(2)
      const noise = Buffer.from(Array.from({ length: 200_000 }, () => Math.floor(random() * 256)))
      writeFileSync(join(dir, 'binary.yaml'), noise)
      await assert.rejects(loadConfig(join(dir, 'binary.yaml'), {}), (error: ConfigError) => error.problems.join() === 'not a UTF-8 text file (it holds NUL bytes): is it the right file?')
      writeFileSync(join(dir, 'latin1.yaml'), Buffer.from('server: { listen: 8080 }\n# caf\xe9\n', 'latin1'))
      await assert.rejects(loadConfig(join(dir, 'latin1.yaml'), {}), (error: ConfigError) => error.problems.join() === 'not a UTF-8 text file (it holds bytes that are not UTF-8): is it the right file?')
    })
    // The same noise as text, as a config read from elsewhere would be: the parser quotes whole runs of it.
    const random = seededRandom(2)
    const text = Buffer.from(Array.from({ length: 200_000 }, () => 1 + Math.floor(random() * 255))).toString('utf8')
    const listed = await problems(text)
    assert.equal(listed.length, 21)
    assert.match(listed[20] as string, /^YAML: \d+ more lines the parser cannot read: is it the right file\?$/)
    for (const problem of listed) assert.ok(problem.length < 200, problem.slice(0, 300))
  })

  it('store given as a URL says where the URL goes', async () => {
    const found = await problems(minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }', 'store: redis://admin:hunter2@cache:6379'))
    assert.deepEqual(found, ['store: expected an object with type: memory or type: redis (a Redis URL goes inside it: { type: redis, url: "redis://***@cache:6379" }), got "redis://***@cache:6379" (line 2)'])
  })

  it('a Redis URL or node the client could not use is a problem of the file: a database by name, credentials that do not decode, a port beyond 65535', async () => {
    const store = (lines: string) => problems(minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }', `store:\n  type: redis\n${lines}`))
    assert.deepEqual(await store('  url: redis://cache:6379/limits'), ['store.url: must name a database by its number (redis://host:6379/0), not "limits" (got "redis://cache:6379/limits") (line 4)'])
    assert.deepEqual(await store('  url: redis://:50%off@cache:6379/0'), ['store.url: has a user name or password that is not valid percent-encoding (write a % in it as %25) (got "redis://***@cache:6379/0") (line 4)'])
    assert.deepEqual(await store('  url: redis://cache:99999'), ['store.url: is not a valid URL (a port from 1 to 65535, a host without spaces) (got "redis://cache:99999") (line 4)'])
    assert.deepEqual(await store('  cluster: [cache-1:6379, "cache-2:65536"]'), ['store.cluster[1]: expected host:port or redis://host:port (a port from 1 to 65535), got "cache-2:65536" (line 4)'])
    assert.deepEqual(await store('  sentinel: { name: main, sentinels: ["s1:0"] }'), ['store.sentinel.sentinels[0]: expected host:port (a port from 1 to 65535), got "s1:0" (line 4)'])
    assert.deepEqual(await store('  url: redis://:p%25ss@cache:6379/2'), [])
  })

  it('says what is wrong with an upstream URL: not a URL, not HTTP, credentials, a query', async () => {
    const upstream = (url: string) => problems(minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }').replace('http://127.0.0.1:9', url))
    assert.deepEqual(await upstream('http://127.0.0.1:99999'), ['routes[0].upstream: expected an http:// or https:// URL, got "http://127.0.0.1:99999", which is not a valid URL (a port from 1 to 65535, a host without spaces) (line 5)'])
    assert.deepEqual(await upstream('ws://127.0.0.1:9'), ['routes[0].upstream: expected an http:// or https:// URL, got "ws://127.0.0.1:9" (line 5)'])
    // A password alone is credentials too: before, it passed, and was dropped without a word.
    assert.deepEqual(await upstream('http://:s3cret@127.0.0.1:9'), ['routes[0].upstream: expected an http:// or https:// URL, got "http://***@127.0.0.1:9", with credentials, which the gateway does not send: an upstream is a base URL (line 5)'])
    assert.deepEqual(await upstream('http://127.0.0.1:9/v1?key=1'), ["routes[0].upstream: expected an http:// or https:// URL, got \"http://127.0.0.1:9/v1?key=1\", with a query or fragment: an upstream is a base URL, to which each request's own path and query are added (line 5)"])
    assert.deepEqual(await upstream('http://127.0.0.1:9/v1'), [])
  })

  it('masks credentials exactly where the URL pattern scheme:[//]user:password@ finds them', () => {
    const reference = (text: string) => text.replace(/([a-z][a-z0-9+.-]*:\/{0,2})[^/@\s"]+@/gi, '$1***@')
    const char = fc.constantFrom('a', 'B', '1', '+', '.', '-', ':', '/', '@', ' ', '"', '\n', 'é', '_', '%')
    fc.assert(fc.property(fc.array(char, { maxLength: 40 }).map((chars) => chars.join('')), (text) => {
      assert.equal(maskCredentials(text), reference(text), JSON.stringify(text))
    }), fcOptions(50_000))
    assert.equal(maskCredentials('redis://admin:pw@host and rediss://:pw@10.0.0.1:6380/0'), 'redis://***@host and rediss://***@10.0.0.1:6380/0')
  })

  it('never quotes a secret in a problem: passwords, the JWT secret, API keys, and the credentials of a URL', async () => {
    const found = await problems(minimal('      - { policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 } }', `
store: { type: redis, url: "http://admin:hunter2-a@127.0.0.1:6379", password: 123456789, sentinel: { sentinels: ["127.0.0.1:26379"], name: m, password: 987654321 } }
identity:
  jwt: { algorithms: [HS256], secret: 112233445566 }
  apiKey: { keys: [sk_live_kept, 998877] }
`).replace('http://127.0.0.1:9', 'http://user:hunter2-b@127.0.0.1:9'))
    const text = found.join('\n')
    for (const secret of ['hunter2', '123456789', '987654321', '112233445566', '998877', 'sk_live']) assert.ok(!text.includes(secret), `${secret} quoted in:\n${text}`)
    // Each is still named, with what was expected.
    assert.ok(found.includes('store.url: expected a redis:// or rediss:// URL, got "http://***@127.0.0.1:6379" (line 3)'), text)
    assert.ok(found.includes('store.password: expected a string, got a number (not shown: a secret); quote it, as text ("…"): YAML reads it as a number (line 3)'), text)
    assert.ok(found.includes('store.sentinel.password: expected a string, got a number (not shown: a secret); quote it, as text ("…"): YAML reads it as a number (line 3)'), text)
    assert.ok(found.includes('identity.jwt.secret: expected a non-empty string, got a number (not shown: a secret); quote it, as text ("…"): YAML reads it as a number (line 5)'), text)
    assert.ok(found.includes('identity.apiKey.keys[1]: expected a non-empty string, got a number (not shown: a secret); quote it, as text ("…"): YAML reads it as a number (line 6)'), text)
    assert.ok(found.some((p) => p.startsWith('routes[0].upstream: expected an http:// or https:// URL, got "http://***@127.0.0.1:9", with credentials, which the gateway does not send')), text)
  })

  it('checks what spans sections: duplicate names, costs beyond a limit, unconfigured identities, tiers', async () => {
    const text = `
identity:
  order: [jwt]
routes:
  - name: api
    match: { path: /a/** }
    upstream: http://127.0.0.1:9
    limits:
      - policies: { algorithm: fixed-window, name: same, limit: 5, windowMs: 1000 }
        cost: 6
      - tiers: { pro: { algorithm: fixed-window, limit: 5, windowMs: 1000 } }
  - name: api
    match: { path: /b/** }
    upstream: http://127.0.0.1:9
    limits:
      - policies: { algorithm: sliding-log, name: same, limit: 5, windowMs: 1000 }
        action: queue
`
    const found = await problems(text)
    assert.deepEqual(found.map((p) => p.replace(/ \(line \d+\)$/, '')), [
      'identity.order[0]: "jwt" is not configured under identity',
      'routes[0].limits[0].cost: 6 exceeds the limit 5 of policy "same", so every request would be refused',
      'routes[0].limits[1].tiers: needs the top-level tiers section (where a request\'s tier comes from)',
      'routes[1].name: "api" names two routes',
      'routes[1].limits[0].policies: policy name "same" is also used by routes[0].limits[0].policies; give each policy its own name (it keys the state and the headers)',
      'routes[1].limits[0].action: queue needs token-bucket, leaky-bucket or fixed-window policies; "same" is sliding-log',
    ])
  })

  it('count: failed or succeeded needs policies that take units back', async () => {
    const text = `
routes:
  - name: login
    upstream: http://127.0.0.1:9
    limits:
      - count: failed
        policies: { algorithm: sliding-window, name: logins, limit: 5, windowMs: 60000 }
      - count: failed
        replenishRate: 1
        burstCapacity: 5
      - count: sometimes
        policies: { algorithm: token-bucket, name: tb, capacity: 5, refillTokens: 1, refillIntervalMs: 1000 }
`
    assert.deepEqual(await problems(text), [
      'routes[0].limits[2].count: expected all, failed, succeeded or in-flight, got "sometimes" (line 11)',
    ])
    assert.deepEqual(await problems(text.replace('count: sometimes', 'count: succeeded')), [
      'routes[0].limits[0].count: failed refunds the responses that do not count, which needs token-bucket, police leaky-bucket or sliding-log policies; "logins" is sliding-window (line 6)',
    ])
    // A concurrency limit counts a request until it ends: Spring Cloud Gateway's bucket refills meanwhile.
    assert.deepEqual(await problems(text.replace('count: sometimes', 'count: succeeded').replaceAll('count: failed', 'count: in-flight')), [
      'routes[0].limits[0].count: in-flight needs sliding-log policies (limit: requests in progress at once; windowMs: the longest one is counted, should its release be lost); "logins" is sliding-window (line 6)',
      'routes[0].limits[1].count: in-flight needs sliding-log policies (limit: requests in progress at once; windowMs: the longest one is counted, should its release be lost); "login.token-bucket:5@1/1s" is token-bucket (line 8)',
    ])
  })

  it('a Spring Cloud Gateway replenishRate that is not whole requests a second says how to write it: as the token bucket it stands for', async () => {
    const scg = (rate: string) => problems(minimal(`      - { replenishRate: ${rate}, burstCapacity: 2 }`))
    assert.deepEqual(await scg('0.5'), ['routes[0].limits[0].replenishRate: expected a positive integer (requests a second), got 0.5; write the token bucket it stands for, which takes any rate: policies: { algorithm: token-bucket, capacity: <burstCapacity>, refillTokens: 1, refillIntervalMs: 2000 } (line 7)'])
    assert.match((await scg('2.5'))[0] as string, /refillTokens: 5, refillIntervalMs: 2000 \}/)
    assert.deepEqual(await scg('0'), ['routes[0].limits[0].replenishRate: expected a positive integer (requests a second), got 0 (line 7)'])
    // What the hint says is a valid limit, the same rate.
    const config = await parseConfig(minimal('      - policies: { algorithm: token-bucket, capacity: 2, refillTokens: 1, refillIntervalMs: 2000 }'), 't.yaml', {})
    assert.equal(config.limitsResolved.length, 1)
  })

  it('Spring Cloud Gateway fields too large together, as the token bucket they stand for, are a problem of the file, at their line', async () => {
    const text = `
routes:
  - name: a
    upstream: http://127.0.0.1:9
    limits:
      - { name: fine, replenishRate: 10, burstCapacity: 9007199254740 }
      - { name: huge, replenishRate: 1, burstCapacity: 9999999999999 }
`
    assert.deepEqual(await problems(text), [
      'routes[0].limits[1].burstCapacity: as the token bucket it stands for, capacity is too large: capacity x refillIntervalMs (1000) must stay below 2^53 for exact arithmetic (got 9999999999999) (line 7)',
    ])
  })

  it('names, for a route taken by earlier ones, the first of them, as a check of every pair would', async () => {
    const segment = fc.constantFrom('api', 'API', 'orders', 'x', '*', 'v*')
    const pattern = fc.tuple(fc.array(segment, { maxLength: 3 }), fc.constantFrom('', '/**', '/')).map(([parts, end]) => `/${parts.join('/')}${end}`.replace(/^\/\//, '/'))
    const match = fc.option(fc.record({
      path: fc.option(fc.array(pattern, { minLength: 1, maxLength: 2 }), { nil: undefined }),
      method: fc.option(fc.constantFrom('GET', 'POST'), { nil: undefined }),
      // One host or several, exact or wildcards at several depths, in any case.
      host: fc.option(fc.oneof(fc.constantFrom('a.test', '*.test', 'b.a.test', '*.a.test', 'A.Test', '*.b.a.test', 'test', '[::1]'), fc.array(fc.constantFrom('a.test', '*.test', '*.a.test', 'x.test'), { minLength: 1, maxLength: 2 })), { nil: undefined }),
    }, { requiredKeys: [] }), { nil: undefined })
    await fc.assert(
      fc.asyncProperty(fc.array(match, { minLength: 1, maxLength: 10 }), fc.boolean(), async (matches, caseSensitive) => {
        const routes = matches.map((m, i) => `  - { name: r${i}, upstream: "http://127.0.0.1:9"${m === undefined ? '' : `, match: ${JSON.stringify(Object.fromEntries(Object.entries(m).filter(([, v]) => v !== undefined)))}`} }`)
        const found = (await problems(`caseSensitive: ${caseSensitive}\nroutes:\n${routes.join('\n')}\n`))
          .flatMap((problem) => /^routes\[(\d+)\](?:\.match)?: can never match: routes\[(\d+)\]/.exec(problem)?.slice(1, 3).join(' < ') ?? [])
        const expected = matches.flatMap((inner, j) => {
          const earlier = matches.findIndex((outer, i) => i < j && matchCovers((outer ?? {}) as MatchOptions, (inner ?? {}) as MatchOptions, caseSensitive))
          return earlier === -1 ? [] : [`${j} < ${earlier}`]
        })
        assert.deepEqual(found, expected)
      }),
      fcOptions(400),
    )
  })

  it('finds routes that can never match: taken by an earlier route (first match wins), or excluding all their own paths', async () => {
    const route = (name: string, match: string) => `  - { name: ${name}, match: ${match}, upstream: "http://127.0.0.1:9" }`
    const text = `
caseSensitive: true
limits:
  - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }
    match: { path: /api/**, exclude: [/**] }
routes:
${route('api', '{ path: /api/** }')}
${route('login', '{ path: /API/login, method: POST }')}
${route('admin-get', '{ path: /admin/**, method: GET }')}
${route('admin-head', '{ path: /admin/users, method: HEAD }')}
${route('admin', '{ path: /admin/** }')}
${route('eu', '{ host: "*.example.eu", headers: { x-region: eu } }')}
${route('eu-shop', '{ path: /shop/**, host: shop.example.eu, headers: { X-Region: eu, x-tenant: "true" } }')}
${route('hidden', '{ path: [/hidden, /hidden/**], exclude: /hidden/** }')}
${route('wild', '{ path: /files/*/** }')}
${route('wild-below', '{ path: /files/a/b }')}
${route('rest', '{ path: /** }')}
  - { name: never, upstream: "http://127.0.0.1:9" }
`
    assert.deepEqual((await problems(text)).map((p) => p.replace(/ \(line \d+\)$/, '')), [
      'limits[0].match.exclude: excludes every path the limit names, so it never applies',
      'routes[3].match: can never match: routes[2] ("admin-get") comes first and takes every request this route would; move this route above it, or narrow that one',
      'routes[6].match: can never match: routes[5] ("eu") comes first and takes every request this route would; move this route above it, or narrow that one',
      'routes[7].match.exclude: excludes every path the route names, so it can never match',
      'routes[11]: can never match: routes[10] ("rest") comes first and takes every request this route would; move this route above it, or narrow that one',
    ])
    // Case-insensitive matching (the default) makes /API/login one of /api/**'s paths; with caseSensitive: true it is another.
    const caseRoutes = `routes:\n${route('api', '{ path: /api/** }')}\n${route('login', '{ path: /API/login }')}\n`
    assert.deepEqual((await problems(caseRoutes)).map((p) => p.replace(/ \(line \d+\)$/, '')), ['routes[1].match: can never match: routes[0] ("api") comes first and takes every request this route would; move this route above it, or narrow that one'])
    assert.deepEqual(await problems(`caseSensitive: true\n${caseRoutes}`), [])
    // A method node's parser answers with 400 (a typo) names requests that never come.
    const methods = `limits:\n  - { policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }, match: { method: PSOT } }\nroutes:\n${route('api', '{ path: /api/**, method: [GET, fetch] }')}\n${route('dav', '{ path: /dav/**, method: [mkcol, M-SEARCH, QUERY] }')}\n`
    assert.deepEqual((await problems(methods)).map((p) => p.replace(/ \(line \d+\)$/, '').replace(/all but ACL, .*, UNSUBSCRIBE$/, 'all but …')), [
      'limits[0].match.method: "PSOT" is not a method the gateway can receive: node\'s HTTP parser answers 400 to all but …',
      'routes[0].match.method: "fetch" is not a method the gateway can receive: node\'s HTTP parser answers 400 to all but …',
    ])
  })

  it('lists what only building the gateway would find: path patterns, proxy CIDRs, a JWT key that cannot verify its algorithms', async () => {
    const { publicKey } = await generateKeyPair('EdDSA')
    await inTempDir(async (dir) => {
      writeFileSync(join(dir, 'ed.pem'), await exportSPKI(publicKey))
      const text = `
identity:
  jwt: { algorithms: [RS256], publicKeyFile: ${join(dir, 'ed.pem')} }
  clientIp: { trustProxy: [10.0.0.0/8, 10.0.0.0/99] }
  apiKey: { header: "x api key" }
limits:
  - match: { exclude: health }
    policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }
routes:
  - name: api
    match: { path: [/v1/**, "api/**"] }
    upstream: http://127.0.0.1:9
    limits:
      - match: { headers: { "bad name": true } }
        policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }
`
      assert.deepEqual(await problems(text), [
        'identity.jwt.publicKeyFile: cannot verify RS256, which needs an rsa key (got "ed25519") (line 3)',
        'identity.clientIp.trustProxy: must hold addresses or CIDRs such as 10.0.0.0/8 or ::1 (got "10.0.0.0/99") (line 4)',
        'identity.apiKey.header: must be a header name (got "x api key") (line 5)',
        'limits[0].match.exclude: must be path patterns starting with "/" (got "health") (line 7)',
        'routes[0].match.path: must be path patterns starting with "/" (got "api/**") (line 11)',
        'routes[0].limits[0].match.headers: must be header names (got "bad name") (line 14)',
      ])
    })
  })

  it('API keys: listed inline or in a file (a changed file is a new version); both, an empty or unreadable file are refused; no list is a warning', async () => {
    await inTempDir(async (dir) => {
      const keysFile = join(dir, 'api-keys')
      writeFileSync(keysFile, '# issued 2026-11\nk-alpha\n\n  k-beta  \r\n')
      const withFile = minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }', `identity:\n  apiKey: { header: x-api-key, keysFile: ${keysFile} }`)
      const first = await parseConfig(withFile, 'test.yaml', {})
      assert.deepEqual(first.apiKeys, ['k-alpha', 'k-beta'])
      assert.deepEqual(configWarnings(first), [])
      writeFileSync(keysFile, 'k-alpha\n')
      const second = await parseConfig(withFile, 'test.yaml', {})
      assert.deepEqual(second.apiKeys, ['k-alpha'])
      assert.notEqual(second.version, first.version, 'a reload must take the new keys')
      // A relative path is read beside the config file, not from the working directory.
      const beside = await parseConfig(minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }', 'identity:\n  apiKey: { keysFile: api-keys }'), join(dir, 'sluice.yaml'), {})
      assert.deepEqual(beside.apiKeys, ['k-alpha'])
      const inline = await parseConfig(minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }', 'identity:\n  apiKey: { keys: [k-1, k-2] }'), 'test.yaml', {})
      assert.deepEqual(inline.apiKeys, ['k-1', 'k-2'])
      const unlisted = await parseConfig(minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }', 'identity:\n  apiKey: { header: x-api-key }'), 'test.yaml', {})
      assert.equal(unlisted.apiKeys, undefined)
      assert.match(configWarnings(unlisted).join(), /identity.apiKey has no keys or keysFile: any value a client sends is an API key with a quota of its own/)
      writeFileSync(keysFile, '# none yet\n\n')
      assert.deepEqual(await problems(withFile), [`identity.apiKey.keysFile: lists no key (${keysFile}): every request would fall through to the next resolver (line 3)`])
      assert.match((await problems(withFile.replace(keysFile, join(dir, 'missing')))).join(), /identity\.apiKey\.keysFile: cannot read: ENOENT/)
      assert.deepEqual(await problems(minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }', `identity:\n  apiKey: { keys: [k-1], keysFile: ${keysFile} }`)), [
        'identity.apiKey: takes keys or keysFile, not both (line 3)',
      ])
      assert.match((await problems(minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }', 'identity:\n  apiKey: { keys: [] }'))).join(), /identity\.apiKey\.keys/)
    })
  })

  it('tiers from API keys: each key listed with its tier, inline or in the file; a tier no limit names, a line of three words, tiers the config does not read, are refused by line, never showing the key', async () => {
    await inTempDir(async (dir) => {
      const limits = '      - tiers: { free: { algorithm: fixed-window, limit: 5, windowMs: 1000 }, pro: { algorithm: fixed-window, limit: 50, windowMs: 1000 } }'
      const keysFile = join(dir, 'api-keys')
      writeFileSync(keysFile, '# key  tier\nk-alpha pro\nk-beta\n  k-gamma \t free \r\n')
      const fromKeys = (identity: string, tiers = 'tiers: { from: apiKey, default: free }') => minimal(limits, `${tiers}\nidentity:\n  apiKey: ${identity}`)
      const file = await parseConfig(fromKeys(`{ keysFile: ${keysFile} }`), 'test.yaml', {})
      assert.deepEqual(file.apiKeys, ['k-alpha', 'k-beta', 'k-gamma'])
      assert.deepEqual([...file.apiKeyTiers ?? []], [['k-alpha', 'pro'], ['k-gamma', 'free']])
      assert.deepEqual(configWarnings(file), [])
      assert.deepEqual(configWarnings(await parseConfig(fromKeys('{ keys: [k-1, k-2] }'), 'test.yaml', {})), [
        'tiers.from: apiKey, but no API key is listed with a tier (a key, a space, its tier: "k-1 pro"), so every request gets the default tier.',
      ])
      const inline = await parseConfig(fromKeys('{ keys: [k-1 pro, k-2 free, k-3] }'), 'test.yaml', {})
      assert.deepEqual([inline.apiKeys, [...inline.apiKeyTiers ?? []]], [['k-1', 'k-2', 'k-3'], [['k-1', 'pro'], ['k-2', 'free']]])
      // A key's new tier is a new version: a reload takes it.
      writeFileSync(keysFile, 'k-alpha free\nk-beta\nk-gamma free\n')
      assert.notEqual((await parseConfig(fromKeys(`{ keysFile: ${keysFile} }`), 'test.yaml', {})).version, file.version)
      writeFileSync(keysFile, 'k-alpha prp\nk-secret-beta pro extra\n')
      assert.deepEqual(await problems(fromKeys(`{ keysFile: ${keysFile} }`)), [
        `identity.apiKey.keysFile: ${keysFile}:2: expected a key, or a key and its tier, separated by spaces; got 3 words (line 4)`,
        `identity.apiKey.keysFile: ${keysFile}:1: the tier "prp" is one no limit gives policies for (their tiers: free, pro) (line 4)`,
      ])
      assert.deepEqual(await problems(fromKeys('{ keys: [k-0, k-1 gold] }')), [
        'identity.apiKey.keys[1]: the tier "gold" is one no limit gives policies for (their tiers: free, pro) (line 4)',
      ])
      writeFileSync(keysFile, 'k-alpha pro\n')
      assert.deepEqual(await problems(fromKeys(`{ keysFile: ${keysFile} }`, 'tiers: { from: { header: x-tier }, default: free }')), [
        `identity.apiKey.keysFile: ${keysFile}:1: names a tier after its key, which only tiers.from: apiKey reads (tiers.from is {"header":"x-tier"}) (line 4)`,
      ])
      assert.deepEqual(await problems(minimal(limits, 'tiers: { from: apiKey, default: free }')), ['tiers.from: apiKey needs identity.apiKey, whose keys name their tiers (line 2)'])
      assert.match((await problems(minimal(limits, 'tiers: { from: apiKeys, default: free }'))).join(), /tiers\.from: expected \{ jwtClaim: <claim> \}, \{ header: <name> \} or apiKey/)
      for (const listed of [await problems(fromKeys(`{ keysFile: ${keysFile} }`, 'tiers: { from: { header: x-tier }, default: free }')), await problems(fromKeys('{ keys: [k-0, k-1 gold] }'))]) {
        assert.ok(!listed.join().includes('k-alpha') && !listed.join().includes('k-1'), 'no key is shown')
      }
    })
  })

  it('warns when a client can choose its own tier: the tier from a header, and no proxy in front to write it', async () => {
    const limits = '      - tiers: { free: { algorithm: fixed-window, limit: 5, windowMs: 1000 }, pro: { algorithm: fixed-window, limit: 50, windowMs: 1000 } }'
    const direct = await parseConfig(minimal(limits, 'tiers: { from: { header: x-tier }, default: free }'), 'test.yaml', {})
    assert.match(configWarnings(direct).join(), /tiers\.from\.header: clients reach this gateway directly .* any client can choose its tier by sending x-tier/)
    const behindProxy = await parseConfig(minimal(limits, 'tiers: { from: { header: x-tier }, default: free }\nidentity:\n  clientIp: { trustProxy: [10.0.0.0/8] }'), 'test.yaml', {})
    assert.deepEqual(configWarnings(behindProxy), [])
  })

  it('warns of a served certificate that has expired, is not valid yet, or ends within 14 days: clients refuse it, and nothing else says why', async () => {
    const tls = new URL('../support/tls/', import.meta.url).pathname
    const limit = '      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }'
    const config = await parseConfig(minimal(limit, `server: { listen: 127.0.0.1:0, tls: { cert: ${tls}server.pem, key: ${tls}server.key } }`), 'test.yaml', {})
    // The test certificate is valid from 2026-11-28 23:20:49 to 2126-11-04 23:20:49 (UTC).
    assert.deepEqual(configWarnings(config, Date.parse('2030-01-01T00:00:00Z')), [])
    assert.deepEqual(configWarnings(config, Date.parse('2126-10-30T00:00:00Z')), ['server.tls.cert expires on 2126-11-04, in 6 day(s): renew it; saving the files reloads it.'])
    assert.deepEqual(configWarnings(config, Date.parse('2126-11-05T00:00:00Z')), ['server.tls.cert expired on 2126-11-04 (CN=127.0.0.1): clients refuse the connection. Renew it; saving the files reloads it.'])
    assert.deepEqual(configWarnings(config, Date.parse('2026-11-01T00:00:00Z')), ['server.tls.cert is not valid until 2026-11-28: clients refuse the connection until then (a clock behind, on this host or theirs?).'])
  })

  it('warns of a trustProxy that trusts every address: the client then writes its own key', async () => {
    const limit = '      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }'
    const warned = async (trustProxy: string) => configWarnings(await parseConfig(minimal(limit, `identity: { clientIp: { trustProxy: ${trustProxy} } }`), 'test.yaml', {}))
    assert.deepEqual(await warned('[10.0.0.0/8, 0.0.0.0/0]'), [
      "identity.clientIp.trustProxy trusts 0.0.0.0/0, every IPv4 address, as a proxy: the client is then the left-most X-Forwarded-For entry, which the client writes, so any client can take a fresh quota per request. List your proxies' addresses, or give the number of proxies in front (a hop count) if their addresses are not known.",
    ])
    assert.match((await warned('["::ffff:0:0/96"]')).join(), /trusts ::ffff:0:0\/96, every IPv4 address/)
    assert.match((await warned('["::/0"]')).join(), /trusts ::\/0, every IPv6 address/)
    assert.deepEqual(await warned('[10.0.0.0/8, "::1"]'), [])
    assert.deepEqual(await warned('2'), [])
  })

  it('a rotated JWT key file is a new config version, so a reload takes it', async () => {
    await inTempDir(async (dir) => {
      const pem = join(dir, 'jwt.pem')
      const text = minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }', `identity:\n  jwt: { algorithms: [ES256], publicKeyFile: ${pem} }`)
      writeFileSync(pem, await exportSPKI((await generateKeyPair('ES256')).publicKey))
      const before = await parseConfig(text, 'test.yaml', {})
      writeFileSync(pem, await exportSPKI((await generateKeyPair('ES256')).publicKey))
      const after = await parseConfig(text, 'test.yaml', {})
      assert.notEqual(after.version, before.version)
      assert.notEqual(after.jwtPublicKey, before.jwtPublicKey)
    })
  })

  it('refuses a rewrite pattern that can take exponential time on a crafted path, and takes ordinary ones', async () => {
    const route = (pattern: string) => `
routes:
  - name: api
    upstream: http://127.0.0.1:9
    rewrite: { pattern: '${pattern}', replacement: '/$1' }
`
    assert.deepEqual(await problems(route('^/v1/(a+)+$')), [
      'routes[0].rewrite.pattern: "^/v1/(a+)+$" nests quantifiers (as (a+)+ does), which can take exponential time on a crafted path; rewrite it without (line 5)',
    ])
    assert.deepEqual(await problems(route('^/v1/([^/]+)/(.*)$')), [])
  })

  it('refuses what would fail at start or contradict itself: the admin listener on the server port, headersMs beyond requestMs; names what trustProxy and prefix take', async () => {
    const limit = '      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }'
    assert.deepEqual(await problems(minimal(limit, 'server: { listen: "0.0.0.0:8080" }\nadmin: { listen: "127.0.0.1:8080" }')), [
      "admin.listen: is server.listen's port (8080): give the admin listener one of its own (line 3)",
    ])
    assert.deepEqual(await problems(minimal(limit, 'admin: { listen: 8080 }')), ["admin.listen: is server.listen's port (8080): give the admin listener one of its own (line 2)"])
    assert.deepEqual(await problems(minimal(limit, 'server: { listen: "127.0.0.1:8080" }\nadmin: { listen: "127.0.0.2:8080" }')), [])
    assert.deepEqual(await problems(minimal(limit, 'server: { listen: 0 }\nadmin: { listen: 0 }')), [], 'port 0 picks two free ports')
    assert.deepEqual(await problems(minimal(limit, 'server: { timeouts: { headersMs: 400000 } }')), [
      'server.timeouts.headersMs: 400000 exceeds requestMs (300000): the whole request, headers included, must arrive within requestMs (line 2)',
    ])
    // Express's `trust proxy: true`, or one CIDR without its list, named what is expected (it said only "invalid value").
    assert.deepEqual(await problems(minimal(limit, 'identity: { clientIp: { trustProxy: true } }')), ['identity.clientIp.trustProxy: expected a list of proxy addresses or CIDRs ([10.0.0.0/8]), a hop count, or false, got true (line 2)'])
    assert.deepEqual(await problems(minimal(limit, 'identity: { clientIp: { trustProxy: 10.0.0.0/8 } }')), ['identity.clientIp.trustProxy: expected a list of proxy addresses or CIDRs ([10.0.0.0/8]), a hop count, or false, got "10.0.0.0/8" (line 2)'])
    // A partition key the chosen fields have no place for; a route's style may drop the one it inherits.
    assert.deepEqual(await problems(minimal(limit, 'headers: { standard: draft-7, partitionKey: true }')), [
      'headers.partitionKey: is a parameter of the draft-10 and draft-8 fields; standard draft-7 has no place for it, so no partition key would be sent (line 2)',
    ])
    const routeStyle = (top: string, route: string) => `headers: ${top}\nroutes:\n  - { name: a, upstream: "http://127.0.0.1:9", headers: ${route} }\n`
    assert.deepEqual(await problems(routeStyle('{ standard: draft-6 }', '{ partitionKey: true }')), [
      'routes[0].headers.partitionKey: is a parameter of the draft-10 and draft-8 fields; standard draft-6 has no place for it, so no partition key would be sent (line 3)',
    ])
    assert.deepEqual(await problems(routeStyle('{ partitionKey: true }', '{ standard: draft-6 }')), [])
    assert.deepEqual(await problems(minimal(limit, 'prefix: "my app"')), ['prefix: expected 1 to 48 printable ASCII characters without spaces or braces, got "my app" (line 2)'])
  })

  it('refuses an identity order with ip before another kind (every request has an address, so the rest is never tried), or a kind named twice', async () => {
    const config = (order: string, key: string) => `
identity:
  apiKey: { header: x-api-key, keys: [k1] }
  order: ${order}
routes:
  - name: api
    upstream: http://127.0.0.1:9
    limits:
      - key: ${key}
        policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }
`
    assert.deepEqual(await problems(config('[ip, apiKey]', '[apiKey, apiKey]')), [
      'identity.order[0]: ip identifies every request, so apiKey after it would never be tried: put ip last (line 4)',
      'routes[0].limits[0].key[1]: "apiKey" is named twice (line 9)',
    ])
    assert.deepEqual(await problems(config('[apiKey, ip]', '[ip]')), [])
    // everyone is every request too; before it, each kind that identifies a request has a quota of its own.
    assert.deepEqual(await problems(config('[apiKey, everyone]', '[everyone, ip]')), [
      'routes[0].limits[0].key[0]: everyone identifies every request, so ip after it would never be tried: put everyone last (line 9)',
    ])
    assert.deepEqual(await problems(config('[everyone]', '[apiKey, everyone]')), [])
    assert.deepEqual(await problems(config('[everybody]', '[ip]')), ['identity.order[0]: expected one of jwt, apiKey, ip, everyone, got "everybody" (line 4)'])
  })

  it('refuses a stripPrefix that begins no path its route matches (the upstream would get every path whole)', async () => {
    const route = (match: string, strip: string, extra = '') => `
${extra}
routes:
  - name: api
    upstream: http://127.0.0.1:9
    ${match}
    stripPrefix: ${strip}
`
    assert.deepEqual(await problems(route('match: { path: /v1/** }', '/api')), [
      'routes[0].stripPrefix: "/api" begins no path the route matches (/v1/**), so nothing would be stripped and the upstream would get every path whole (line 7)',
    ])
    // Only whole segments are stripped: /apiv2 does not begin with /api as stripPrefix reads it.
    assert.equal((await problems(route('match: { path: [/apiv2/**, /apix] }', '/api'))).length, 1)
    assert.equal((await problems(route('match: { path: /v1 }', '/v1/users'))).length, 1, 'a pattern without a wildcard never goes past its own path')
    assert.equal((await problems(route('match: { path: /API/** }', '/api', 'caseSensitive: true'))).length, 1)
    for (const [match, strip] of [
      ['match: { path: /api/** }', '/api'], ['match: { path: /api }', '/api'], ['match: { path: /api/ }', '/api'],
      ['match: { path: /API/** }', '/api'], ['match: { path: [/v1/**, /api/**] }', '/api'], ['match: { path: /v1/** }', '/v1/users'],
      ['match: { path: "/v*/**" }', '/v2'], ['match: { path: "/**/x" }', '/api'], ['match: { host: api.example.com }', '/api'], ['', '/api'],
      ['match: { path: /v1/** }', '/'],
    ]) {
      assert.deepEqual(await problems(route(match as string, strip as string)), [], `${match} with stripPrefix ${strip}`)
    }
  })

  it('refuses a limit whose match names no request its route takes: /login in a route of /api/**, DELETE in a route of GET', async () => {
    const config = (routeMatch: string, limitMatch: string, extra = '') => `
${extra}
routes:
  - name: api
    match: ${routeMatch}
    upstream: http://127.0.0.1:9
    limits:
      - match: ${limitMatch}
        policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }
`
    assert.deepEqual(await problems(config('{ path: /api/** }', '{ path: /login }')), [
      "routes[0].limits[0].match: no request the route takes (/api/**) is one this limit names (/login), so it never applies: a limit's match narrows its route's, with the whole path (line 8)",
    ])
    assert.deepEqual(await problems(config('{ path: /r/**, method: GET }', '{ method: [DELETE, PUT] }')), [
      "routes[0].limits[0].match: no request the route takes (GET /r/**) is one this limit names (DELETE, PUT /**), so it never applies: a limit's match narrows its route's, with the whole path (line 8)",
    ])
    assert.equal((await problems(config('{ path: [/v1/**, /v2/**] }', '{ path: [/v3/*, /api*] }'))).length, 1)
    // A global limit that no route's requests meet: those get 404, unlimited.
    const global = (match: string) => `limits:\n  - match: ${match}\n    policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }\nroutes:\n  - { name: api, match: { path: /api/** }, upstream: "http://127.0.0.1:9" }\n  - { name: web, match: { path: /web/**, method: GET }, upstream: "http://127.0.0.1:9" }\n`
    assert.deepEqual(await problems(global('{ path: /admin/** }')), [
      'limits[0].match: no route takes a request this limit names (/admin/**), so it never applies: requests no route takes are answered 404 unlimited (line 2)',
    ])
    assert.deepEqual(await problems(global('{ path: /web/x, method: DELETE }')), [
      'limits[0].match: no route takes a request this limit names (DELETE /web/x), so it never applies: requests no route takes are answered 404 unlimited (line 2)',
    ])
    assert.deepEqual(await problems(global('{ path: [/admin/**, /api/login] }')), [])
    assert.deepEqual(await problems(global('{ method: POST }')), [])
    assert.equal((await problems(config('{ path: /API/** }', '{ path: /api/login }', 'caseSensitive: true'))).length, 1)
    // Any request both can take, and every one POST can (an override makes a POST read as another method), is allowed.
    for (const [route, limit] of [
      ['{ path: /api/** }', '{ path: /api/login }'], ['{ path: /api/** }', '{ path: /api }'], ['{ path: /api/** }', '{ path: /API/login }'],
      ['{ path: /api/** }', '{ path: "/*/login" }'], ['{ path: "/v*/**" }', '{ path: /v2/x }'], ['{ path: /api/x }', '{ path: /api/x/ }'],
      ['{ path: /api/** }', '{ method: POST }'], ['{ method: GET }', '{ method: HEAD }'], ['{ method: GET }', '{ method: POST }'],
      ['{ method: POST }', '{ method: DELETE }'], ['{ path: /api/** }', '{ headers: { x-debug: true } }'],
    ]) {
      assert.deepEqual(await problems(config(route as string, limit as string)), [], `${route} with ${limit}`)
    }
  })

  it('refuses a memory store too small for one request: it would evict the request\'s own state and refuse nothing', async () => {
    const config = (maxKeys: number) => `
store: { type: memory, maxKeys: ${maxKeys} }
limits:
  - policies: [{ algorithm: fixed-window, limit: 5, windowMs: 1000 }, { algorithm: fixed-window, limit: 50, windowMs: 60000 }]
routes:
  - name: api
    match: { path: /api/** }
    upstream: http://127.0.0.1:9
    limits:
      - tiers: { free: { algorithm: fixed-window, limit: 5, windowMs: 1000 }, pro: [{ algorithm: fixed-window, limit: 50, windowMs: 1000 }, { algorithm: sliding-log, limit: 500, windowMs: 60000 }] }
  - name: other
    upstream: http://127.0.0.1:9
tiers: { from: { header: x-plan }, default: free }
`
    // Two global policies, and the route's largest tier has two: four entries.
    assert.deepEqual(await problems(config(3)), [
      "store.maxKeys: 3 is below the 4 entries one client's request can take (one per policy it is decided with): each request would evict its own state and none would be refused (line 2)",
    ])
    assert.deepEqual(await problems(config(4)), [])
  })

  it('admin.watch: keys as the gateway makes them (an IPv6 address as its /56 network, a mapped IPv4 as IPv4); refuses a key of no kind it makes', async () => {
    const limit = '      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }'
    const identity = 'identity: { apiKey: { header: x-api-key, keys: [alpha] }, jwt: { algorithms: [HS256], secret: "${JWT_SECRET}" } }'
    const env = { JWT_SECRET: 'a'.repeat(32) }
    const watched = await parseConfig(minimal(limit, `admin: { watch: [apikey:alpha, "ip:2001:db8:1:2::7", "ip:::ffff:192.0.2.1", ip:192.0.2.9, "user:42", anonymous] }\n${identity}`), 'test.yaml', env)
    assert.deepEqual(watched.admin.watch, ['apikey:alpha', 'ip:2001:db8:1::/56', 'ip:192.0.2.1', 'ip:192.0.2.9', 'user:42', 'anonymous'])
    const wider = await parseConfig(minimal(limit, 'admin: { watch: ["ip:2001:db8:1:2::7"] }\nidentity: { clientIp: { ipv6Prefix: 64 } }'), 'test.yaml', {})
    assert.deepEqual(wider.admin.watch, ['ip:2001:db8:1:2::/64'])
    assert.deepEqual(await problems(minimal(limit, 'admin: { watch: [partner-1, "ip:localhost"] }')), [
      'admin.watch[0]: "partner-1" is not a key the gateway makes: ip:<address>, apikey:<key>, user:<JWT claim>, anonymous or everyone (line 2)',
      'admin.watch[1]: "ip:localhost" holds no IP address (ip:203.0.113.7, ip:2001:db8::1) (line 2)',
    ])
    // A key no request is given would show a full quota for ever; an API key is not quoted (problems are logged).
    assert.deepEqual(await problems(minimal(limit, 'admin: { watch: ["user:42", apikey:s3cret-key] }')), [
      'admin.watch[0]: "user:42" is a JWT identity, and identity.jwt is not configured: no request is given it (line 2)',
      'admin.watch[1]: is an API key identity (apikey:…), and identity.apiKey is not configured: no request is given it (line 2)',
    ])
    assert.deepEqual(await problems(minimal(limit, `admin: { watch: [apikey:s3cret-kee] }\n${identity}`), env), [
      'admin.watch[0]: is an API key (apikey:…) that is not one of the listed keys: no request is given it (line 2)',
    ])
  })

  it('refuses a rewrite replacement that names a group its pattern does not have, which String.replace would send as written', async () => {
    const route = (pattern: string, replacement: string) => `
routes:
  - name: api
    upstream: http://127.0.0.1:9
    rewrite: { pattern: '${pattern}', replacement: '${replacement}' }
`
    assert.deepEqual(await problems(route('^/api/(.*)', '/v2/$2')), [
      'routes[0].rewrite.replacement: $2 refers to a group the pattern does not have (it has 1 capturing group), so it would be sent as written; write $$ for a literal $ (line 5)',
    ])
    assert.deepEqual(await problems(route('^/api/(?<rest>.*)', '/v2/$<reset>')), [
      'routes[0].rewrite.replacement: $<reset> names no group of the pattern (it has <rest>): write $$ for a literal $ (line 5)',
    ])
    assert.deepEqual(await problems(route('^/api/', '/v2/$1')), [
      'routes[0].rewrite.replacement: $1 refers to a group the pattern does not have (it has 0 capturing groups), so it would be sent as written; write $$ for a literal $ (line 5)',
    ])
    for (const [pattern, replacement] of [['^/api/(.*)', '/v2/$1'], ['^/api/(?<rest>.*)', '/v2/$<rest>'], ['^/api/(.*)', '/v2/$$1/$&'], ['^/(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)', '/$10']]) {
      assert.deepEqual(await problems(route(pattern as string, replacement as string)), [], `${pattern} -> ${replacement}`)
    }
  })

  it('substitutes ${ENV} (with defaults) and reports unset variables', async () => {
    const text = minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }', `server:
  listen: 127.0.0.1:\${PORT}
identity:
  jwt: { algorithms: [HS256], secret: "\${JWT_SECRET}" }
  apiKey: { header: "\${KEY_HEADER:-x-api-key}" }`)
    const secret = 's3cret-s3cret-s3cret-s3cret-s3cret'
    const config = await parseConfig(text, 't.yaml', { PORT: '7001', JWT_SECRET: secret })
    assert.equal(config.server.listen.port, 7001)
    assert.equal(config.identity.jwt?.secret, secret)
    // A weak secret is refused by its length; its value stays out of the message.
    assert.deepEqual(await problems(text, { PORT: '7001', JWT_SECRET: 's3cret' }), [
      'identity.jwt.secret: must be at least 32 bytes for HS256, as RFC 7518 3.2 requires: a shorter one can be guessed offline from any token it signed (got "6 bytes") (line 5)',
    ])
    assert.equal(config.identity.apiKey?.header, 'x-api-key')
    assert.deepEqual(await problems(text, { PORT: '7001' }), ['identity.jwt.secret: environment variable JWT_SECRET is not set (line 5)'])
    // An unset variable does not hide the file's other problems, nor is its field reported twice.
    assert.deepEqual(await problems(text.replace('limit: 5', 'limit: -5'), {}), [
      'server.listen: environment variable PORT is not set (line 3)',
      'identity.jwt.secret: environment variable JWT_SECRET is not set (line 5)',
      'routes[0].limits[0].policies.limit: must be a positive integer (got -5) (line 11)',
    ])
  })

  it('keeps a reference that reads as a number as text where only text goes (a password of digits), and a number where a number goes', async () => {
    const text = minimal('      - policies: { algorithm: fixed-window, limit: "${LIMIT}", windowMs: 1000 }', `server:
  listen: \${PORT}
store:
  type: redis
  url: redis://127.0.0.1:6379
  password: \${REDIS_PASSWORD}
identity:
  apiKey: { header: "\${KEY_HEADER}", keys: ["\${API_KEY}"] }`)
    const config = await parseConfig(text, 't.yaml', { PORT: '7001', LIMIT: '5', REDIS_PASSWORD: '12345', KEY_HEADER: '1', API_KEY: '007' })
    assert.equal(config.server.listen.port, 7001)
    assert.equal((config.limitsResolved[0]?.policies.get('')?.[0] as { limit?: number } | undefined)?.limit, 5)
    assert.deepEqual([config.store.type === 'redis' && config.store.password, config.identity.apiKey?.header, config.identity.apiKey?.keys], ['12345', '1', ['007']])
    // A name or a host YAML reads as a number is said to be one, with what to do.
    assert.deepEqual(await problems(minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }').replace('name: api', 'name: 2024\n    match: { host: 1.5 }')), [
      'routes[0].name: expected a name, got 2024; quote it, as text ("…"): YAML reads it as a number (line 4)',
      'routes[0].match.host: expected a string or a list of strings, got 1.5; quote it, as text ("…"): YAML reads it as a number (line 5)',
    ])
    // A duration or a number written as text where milliseconds go says what to write.
    assert.deepEqual(await problems(minimal('      - replenishRate: "5"\n        burstCapacity: 10', 'server:\n  timeouts: { upstreamMs: 5s }')), [
      'server.timeouts.upstreamMs: expected a positive number of milliseconds, got "5s"; upstreamMs is in milliseconds: 5000 for 5s (line 3)',
      'routes[0].limits[0].replenishRate: expected a positive integer (requests a second), got "5"; write it as a number, without quotes: 5 (line 8)',
    ])
    // Written as a number, it is one: said, with what to do, and not shown.
    assert.deepEqual(await problems(text.replace('${REDIS_PASSWORD}', '12345'), { PORT: '7001', LIMIT: '5', KEY_HEADER: 'x', API_KEY: 'k' }), [
      'store.password: expected a string, got a number (not shown: a secret); quote it, as text ("…"): YAML reads it as a number (line 7)',
    ])
  })

  it('reads a reference in a default (${A:-${B}}) as a shell does, takes $${ for a literal ${, and refuses a ${ that starts no reference without quoting the value', async () => {
    const secret = (value: string) => minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 }', `identity:\n  jwt: { algorithms: [HS256], secret: "${value}" }`)
    const long = 'x'.repeat(40)
    const secretOf = async (value: string, env: NodeJS.ProcessEnv) => (await parseConfig(secret(value), 't.yaml', env)).identity.jwt?.secret
    assert.equal(await secretOf('${JWT_SECRET:-${FALLBACK_SECRET}}', { FALLBACK_SECRET: `fallback-${long}` }), `fallback-${long}`)
    assert.equal(await secretOf('${JWT_SECRET:-${FALLBACK_SECRET}}', { JWT_SECRET: `primary-${long}`, FALLBACK_SECRET: 'unused' }), `primary-${long}`)
    assert.equal(await secretOf(`\${A:-\${B:-default-\${C:-${long}}}}`, {}), `default-${long}`)
    assert.equal(await secretOf(`${long}$\${NOT_A_REFERENCE}`, {}), `${long}\${NOT_A_REFERENCE}`)
    assert.deepEqual(await problems(secret('${JWT_SECRET:-${FALLBACK_SECRET}}'), {}), ['identity.jwt.secret: environment variable FALLBACK_SECRET is not set (line 3)'])
    // Kept as written, these became the secret itself; the messages say where, not what.
    assert.deepEqual(await problems(secret(`hunter2\${${long}`), {}), [
      'identity.jwt.secret: the ${ at character 8 starts no environment reference: write ${NAME} or ${NAME:-default}, or $${ for a literal ${ (line 3)',
    ])
    assert.deepEqual(await problems(secret(`\${JWT_SECRET:-hunter2${long}`), {}), ['identity.jwt.secret: the ${JWT_SECRET:- at character 1 is not closed by a } (line 3)'])
    assert.deepEqual(await problems(secret(`${'${A:-'.repeat(50_000)}x${'}'.repeat(50_000)}`), {}), ['identity.jwt.secret: the ${A:- at character 41 nests defaults more than 8 deep (line 3)'])
    assert.deepEqual(await problems(secret(`\${1SECRET}hunter2${long}`), {}), [
      'identity.jwt.secret: the ${ at character 1 starts no environment reference: write ${NAME} or ${NAME:-default}, or $${ for a literal ${ (line 3)',
    ])
  })

  it('takes blockMs on a limit\'s policy, and names a bad one with its line', async () => {
    const text = minimal('      - policies: { algorithm: fixed-window, limit: 5, windowMs: 900000, blockMs: 3600000, name: login }')
    const config = await parseConfig(text, 't.yaml', {})
    assert.equal(resolvePolicies(config.routes[0]?.limits[0]?.policies as unknown as Policy)[0]?.blockMs, 3_600_000)
    assert.deepEqual(await problems(text.replace('blockMs: 3600000', 'blockMs: -5')), ['routes[0].limits[0].policies.blockMs: must be a positive integer (got -5) (line 7)'])
    assert.deepEqual(await problems(text.replace('fixed-window, limit: 5, windowMs: 900000', 'leaky-bucket, capacity: 5, leakTokens: 1, leakIntervalMs: 1000, mode: shape')),
      ['routes[0].limits[0].policies.blockMs: applies to policies that refuse calls; a shape-mode leaky bucket queues them (use mode: police) (got 3600000) (line 7)'])
  })

  it('refuses a YAML alias bomb with a problem, not a crash, and takes an anchor used many times', async () => {
    const bomb = 'YAML: the file holds more than 2,000,000 values, counting each alias (*name) as the values of its anchor: an alias bomb ("billion laughs"), or not a config'
    const levels = ['a: &a [x, x, x, x, x, x, x, x, x]']
    for (let i = 1; i < 8; i++) levels.push(`l${i}: &l${i} [${Array(9).fill(i === 1 ? '*a' : `*l${i - 1}`).join(', ')}]`)
    assert.deepEqual(await problems(`${levels.join('\n')}\nroutes: *l7\n`), [bomb])
    // Merged, as <<: copies the keys of each map it names.
    const merges = ['x-0: &m0 { k0: 1, k1: 1, k2: 1, k3: 1, k4: 1, k5: 1, k6: 1, k7: 1, k8: 1, k9: 1 }']
    for (let i = 1; i < 10; i++) merges.push(`x-${i}: &m${i}\n  <<: [${Array(10).fill(`*m${i - 1}`).join(', ')}]\n  k${i}0: 1`)
    assert.deepEqual(await problems(`${merges.join('\n')}\nroutes: [{ name: a, upstream: "http://127.0.0.1:9", x: *m9 }]\n`), [bomb])
    // One upstream and one policy for 300 routes: yaml's own guard refused an anchor's 101st use as an attack.
    const routes = Array.from({ length: 300 }, (_, i) => `  - { name: r${i}, match: { path: /r${i} }, upstream: *upstream, limits: [{ policies: [{ <<: *policy, name: p${i} }] }] }`)
    const shared = await parseConfig(`x-upstream: &upstream http://127.0.0.1:9\nx-policy: &policy { algorithm: fixed-window, limit: 5, windowMs: 1000 }\nroutes:\n${routes.join('\n')}\n`, 't.yaml', {})
    assert.equal(shared.routes.length, 300)
    assert.equal(shared.routes[299]?.upstream, 'http://127.0.0.1:9')
    assert.deepEqual(shared.limitsResolved[299]?.policies.get(''), [{ algorithm: 'fixed-window', limit: 5, windowMs: 1000, name: 'p299' }])
  })

  it('a second YAML document in the file is named at its line, in words for the user rather than for the parser\'s caller', async () => {
    assert.deepEqual(await problems('routes:\n  - name: a\n    upstream: http://127.0.0.1:9\n---\nroutes: []\n'), [
      'YAML: a second document starts here (a --- line after content): a config is one document; remove the line, or the rest after it (line 4)',
    ])
    // A --- that opens the only document is no problem.
    assert.equal((await parseConfig('---\nroutes:\n  - name: a\n    upstream: http://127.0.0.1:9\n', 't.yaml', {})).routes.length, 1)
  })

  it('names the line of an alias whose anchor is missing or comes after it', async () => {
    const text = `
routes:
  - name: api
    upstream: *upstream
    limits: *limits
upstreams: &limits []
`
    assert.deepEqual(await problems(text), [
      'YAML: *upstream refers to no anchor &upstream before it (line 4)',
      'YAML: *limits refers to no anchor &limits before it (line 5)',
    ])
  })

  it('refuses an alias inside the node it names (the value would contain itself) with a problem, not a crash', async () => {
    // It was a TypeError ("Converting circular structure to JSON"): check-config printed a stack and exited 3.
    const text = `
admin:
  watch: &watched
    - *watched
routes: &routes
  - name: api
    upstream: http://127.0.0.1:9
    limits: *routes
`
    assert.deepEqual(await problems(text), [
      'YAML: *watched is inside the &watched it refers to, so the value would contain itself (line 4)',
      'YAML: *routes is inside the &routes it refers to, so the value would contain itself (line 8)',
    ])
    // Aliases of nodes that are done, also of a redefined anchor, are taken.
    const reused = await parseConfig(`
routes:
  - { name: a, upstream: &up http://127.0.0.1:9, match: { path: &p /a/**, method: POST } }
  - { name: b, upstream: *up, match: { path: *p } }
  - { name: c, upstream: *up, match: { path: &p /c/**, host: c.test } }
  - { name: d, upstream: *up, match: { path: *p } }
`, 'test.yaml', {})
    assert.deepEqual(reused.routes.map((route) => [route.name, route.upstream, route.match?.path]), [
      ['a', 'http://127.0.0.1:9', '/a/**'], ['b', 'http://127.0.0.1:9', '/a/**'], ['c', 'http://127.0.0.1:9', '/c/**'], ['d', 'http://127.0.0.1:9', '/c/**'],
    ])
  })

  it('refuses a key that is a map or a list, naming its line, without a process warning', async (t) => {
    // The yaml package turned it into a string ("[ x ]") with a process warning on stderr.
    const warnings: string[] = []
    const onWarning = (warning: Error) => warnings.push(warning.message)
    process.on('warning', onWarning)
    t.after(() => { process.off('warning', onWarning) })
    const text = minimal('      - { policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 } }').replace('    upstream:', '    ? [x]\n    : y\n    upstream:')
    assert.deepEqual(await problems(text), ['YAML: a key that is a map or a list; keys are names (line 5)'])
    // Bytes as a key (the yaml package warned on stderr here too), and bytes as a value, described rather than dumped.
    const binaryKey = minimal('      - { policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 } }').replace('    upstream:', '    !!binary aGk=: y\n    upstream:')
    assert.deepEqual(await problems(binaryKey), ['YAML: a key that is binary data (!!binary); keys are names (line 5)'])
    const binaryName = minimal('      - { policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 } }').replace(/name: \w+/, 'name: !!binary aGk=')
    assert.match((await problems(binaryName)).join('\n'), /\.name: expected a name, got binary data \(!!binary, 2 bytes\) \(line \d+\)/)
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(warnings, [])
  })

  it('refuses __proto__ as a key, where a map of names (a policy, tiers, match headers) would drop it unseen', async () => {
    for (const limits of [
      '      - { policies: { algorithm: fixed-window, limit: 5, windowMs: 1000, __proto__: { limit: 1 } } }',
      '      - { tiers: { __proto__: { algorithm: fixed-window, limit: 5, windowMs: 1000 }, free: { algorithm: fixed-window, limit: 1, windowMs: 1000 } } }',
      '      - { match: { headers: { __proto__: x } }, policies: { algorithm: fixed-window, limit: 5, windowMs: 1000 } }',
    ]) {
      assert.deepEqual(await problems(minimal(limits)), ['YAML: __proto__ is not a name a config can use: JavaScript reserves it, so it would be dropped, not read (line 7)'], limits)
    }
  })

  it('refuses more policies in one limit than a limiter decides together, naming the line', async () => {
    const list = Array.from({ length: 1001 }, (_, i) => `          - { algorithm: fixed-window, name: p${i}, limit: 5, windowMs: 1000 }`).join('\n')
    assert.deepEqual(await problems(minimal(`      - policies:\n${list}`)), ['routes[0].limits[0].policies: policies must hold at most 1000 policies: each decision reads and writes every one (got an array of 1001) (line 8)'])
  })

  it('names unnamed policies after their route, so equal limits on two routes never share state', async () => {
    const policy = '{ algorithm: fixed-window, limit: 5, windowMs: 1000 }'
    const config = await parseConfig(`
limits: [{ policies: ${policy} }]
routes:
  - { name: a, match: { path: /a/** }, upstream: "http://127.0.0.1:9", limits: [{ policies: ${policy} }] }
  - { name: b, match: { path: /b/** }, upstream: "http://127.0.0.1:9", limits: [{ policies: ${policy} }] }
`, 't.yaml', {})
    assert.deepEqual(config.limitsResolved.map((l) => l.policies.get('')?.[0]?.name), ['global.fixed-window:5/1s', 'a.fixed-window:5/1s', 'b.fixed-window:5/1s'])
  })

  it('YAML syntax errors name their line', async () => {
    const found = await problems('routes:\n  - name: a\n   upstream: [\n')
    assert.equal(found.length > 0, true)
    assert.match(found[0] as string, /^YAML: .* \(line \d\)$/)
    // An unquoted reference in a flow mapping is `$` and then a mapping: one problem for the line, saying what to write.
    const unquoted = minimal('      - policies: { algorithm: token-bucket, capacity: ${CAP}, refillTokens: 1, refillIntervalMs: 1000 }')
    assert.deepEqual(await problems(unquoted, { CAP: '5' }), ['YAML: Unexpected flow-map-start at node end (line 7); inside { } or [ ], quote a reference: "${NAME}"'])
    const quoted = await parseConfig(unquoted.replace('${CAP}', '"${CAP}"'), 't.yaml', { CAP: '5' })
    assert.deepEqual(quoted.limitsResolved[0]?.policies.get('')?.[0], { algorithm: 'token-bucket', name: 'api.token-bucket:5@1/1s', capacity: 5, refillTokens: 1, refillIntervalMs: 1000 })
  })

  it('the committed JSON Schema is current, accepts the example and rejects a wrong file', () => {
    const committed = JSON.parse(readFileSync(new URL('../../schema/sluice.schema.json', import.meta.url), 'utf8')) as object
    assert.deepEqual(committed, JSON.parse(JSON.stringify(configJsonSchema())), 'run npm run schema')
    const ajv = new Ajv2020({ strict: false })
    const validate = ajv.compile(committed)
    assert.equal(validate(parse(readFileSync(example, 'utf8'))), true, JSON.stringify(validate.errors))
    assert.equal(validate({ routes: [{ name: 'a', upstream: 'http://x', limits: [{ policies: { algorithm: 'token-bucket', capacity: 5 } }] }] }), false)
    // An editor reads references unsubstituted: they pass where the gateway would substitute them, and nothing else does.
    const readmeConfig = /```yaml\n([\s\S]*?)```/.exec(readFileSync(new URL('../../README.md', import.meta.url), 'utf8'))?.[1] as string
    assert.match(readmeConfig, /url: \$\{REDIS_URL\}/)
    assert.equal(validate(parse(readmeConfig)), true, JSON.stringify(validate.errors))
    const withCapacity = (capacity: unknown) => validate({ routes: [{ name: 'a', upstream: 'http://x', limits: [{ policies: { algorithm: 'token-bucket', capacity, refillTokens: 1, refillIntervalMs: 1000 } }] }] })
    assert.deepEqual([5, '${CAP}', '${CAP:-5}', -5, 'five', '$${CAP}', '${}'].map(withCapacity), [true, true, true, false, false, false, false])
    const routes = [{ name: 'a', upstream: 'http://x' }]
    assert.equal(validate({ server: { listen: 8080, tls: { cert: 'c', key: 'k', http2: '${HTTP2}' } }, store: { type: 'redis', url: '${REDIS_URL}', onFailure: '${ON_FAILURE:-open}' }, routes }), true, JSON.stringify(validate.errors))
    // A constant tells a union's shapes apart, and stays one.
    assert.equal(validate({ store: { type: '${STORE}' }, routes }), false)
    // Top-level x- fields are the file's own (anchors), as the gateway takes them; elsewhere they are unknown fields.
    assert.equal(validate({ 'x-policy': { anything: 1 }, routes }), true, JSON.stringify(validate.errors))
    assert.equal(validate({ server: { 'x-note': 1 }, routes }), false)
  })

  it('shares a block as YAML files do: an anchor in a top-level x- field, merged with <<: *name and its own fields over it', async () => {
    const text = `x-policy: &policy
  algorithm: token-bucket
  capacity: 10
  refillTokens: 1
  refillIntervalMs: 1000
x-routes:
  upstream: &upstream http://127.0.0.1:9
routes:
  - name: a
    upstream: *upstream
    limits:
      - policies:
          - <<: *policy
            name: a
          - <<: *policy
            name: a-large
            capacity: 50
`
    const config = await parseConfig(text, 't.yaml', {})
    assert.deepEqual(config.limitsResolved[0]?.policies.get(''), [
      { algorithm: 'token-bucket', capacity: 10, refillTokens: 1, refillIntervalMs: 1000, name: 'a' },
      { algorithm: 'token-bucket', capacity: 50, refillTokens: 1, refillIntervalMs: 1000, name: 'a-large' },
    ])
    assert.equal(config.routes[0]?.upstream, 'http://127.0.0.1:9')
    // What the merged block brings is checked where it is merged.
    assert.deepEqual(await problems(text.replace('capacity: 50', 'capacity: -50')), ['routes[0].limits[0].policies[1].capacity: must be a positive integer (got -50) (line 17)'])
    // A wrong value the anchor brings is named at the anchor, where to change it, and at each alias or merge that brought it, in their order.
    assert.deepEqual(await problems(text.replace('capacity: 10', 'capacity: 0').replace('&upstream http://127.0.0.1:9', '&upstream http//127.0.0.1:9')), [
      'routes[0].upstream: expected an http:// or https:// URL, got "http//127.0.0.1:9", which is not a valid URL (a port from 1 to 65535, a host without spaces) (line 7, through *upstream at line 10)',
      'routes[0].limits[0].policies[0].capacity: must be a positive integer (got 0) (line 3, through *policy at line 13)',
    ])
    // An unset variable in the anchor is its problem, at the anchor, once: not again where the block is merged or aliased.
    const unsetCapacity = text.replace('capacity: 10', 'capacity: ${CAP}').replace('upstream: &upstream http://127.0.0.1:9', 'upstream: &upstream ${UPSTREAM}')
    assert.deepEqual(await problems(unsetCapacity), [
      'x-policy.capacity: environment variable CAP is not set (line 3)',
      'x-routes.upstream: environment variable UPSTREAM is not set (line 7)',
    ])
    // An empty value written where it is read is still a problem of its own.
    assert.deepEqual(await problems(unsetCapacity.replace('name: a-large', 'name: ""')), [
      'x-policy.capacity: environment variable CAP is not set (line 3)',
      'x-routes.upstream: environment variable UPSTREAM is not set (line 7)',
      'routes[0].limits[0].policies[1].name: must be 1 to 64 printable ASCII characters without spaces (got "") (line 16)',
    ])
    // Only at the top level: an x- field within a section is an unknown field, as a misspelt one is.
    assert.deepEqual(await problems(text.replace('routes:\n  - name: a\n', 'routes:\n  - name: a\n    x-note: 1\n')), ['routes[0].x-note: is not a known field (line 10)'])
  })

  it('sluice check-config: exit 0 for a valid file, 1 with every problem for an invalid one, 2 without a file', async () => {
    const valid = await runCli(['check-config', example])
    assert.equal(valid.code, 0, valid.stderr)
    assert.match(valid.stdout, /valid \(version [0-9a-f]{12}\): 3 routes, 3 limits, 4 policies, store memory/)
    const missing = await runCli(['check-config', '/nonexistent/sluice.yaml'])
    assert.equal(missing.code, 1)
    assert.match(missing.stderr, /cannot read the file/)
    assert.equal((await runCli(['check-config'])).code, 2)
    // The flag `gateway` takes works here too; two files are one too many.
    const flagged = await runCli(['check-config', '--config', example])
    assert.equal(flagged.code, 0, flagged.stderr)
    assert.equal(flagged.stdout, valid.stdout)
    const two = await runCli(['check-config', '-c', example, '/other.yaml'])
    assert.equal(two.code, 2)
    assert.match(two.stderr, /expected one FILE, got ".*sluice\.yaml", "\/other\.yaml"/)
    assert.equal((await runCli(['gateway', '--help'])).code, 0)
    const refused = await runCli(['gateway', '--config', '/nonexistent/sluice.yaml'])
    assert.equal(refused.code, 1)
    assert.match(refused.stderr, /refusing to start/)
    // A port another process holds is named by its field, with what to do (exit 3: could not run).
    const holder = createServer()
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve))
    const dir = mkdtempSync(join(tmpdir(), 'sluice-listen-'))
    try {
      const taken = (holder.address() as AddressInfo).port
      writeFileSync(join(dir, 'a.yaml'), `server: { listen: "127.0.0.1:${taken}" }\nadmin: { listen: "127.0.0.1:0" }\nroutes: [{ name: all, upstream: "http://127.0.0.1:1" }]\n`)
      writeFileSync(join(dir, 'b.yaml'), `server: { listen: "127.0.0.1:0" }\nadmin: { listen: "127.0.0.1:${taken}" }\nroutes: [{ name: all, upstream: "http://127.0.0.1:1" }]\n`)
      for (const [file, field] of [['a.yaml', 'server.listen'], ['b.yaml', 'admin.listen']]) {
        const busy = await runCli(['gateway', '--no-watch', '--config', join(dir, file as string)])
        assert.equal(busy.code, 3, busy.stderr)
        assert.match(busy.stderr, new RegExp(`^sluice gateway: cannot listen on 127\\.0\\.0\\.1:${taken} \\(${field}\\): listen EADDRINUSE: address already in use 127\\.0\\.0\\.1:${taken}; another process listens there: stop it, or give ${field} another port \\(0 picks a free one\\)$`, 'm'))
      }
      // Written with a reference, as the demo's is, the port is changed through the variable: it is named.
      const demoBusy = await runCli(['gateway', '--no-watch', '--demo-upstream', '--config', example], { PORT: String(taken), ADMIN_PORT: '0' })
      assert.equal(demoBusy.code, 3, demoBusy.stderr)
      assert.match(demoBusy.stderr, new RegExp(`another process listens there: stop it, or set PORT to another port \\(server\\.listen is written "127\\.0\\.0\\.1:\\$\\{PORT:-8080\\}"; 0 picks a free one\\)$`, 'm'))
    } finally {
      holder.close()
      rmSync(dir, { recursive: true, force: true })
    }
    // Every command refuses what it does not take, demo too (it took any argument and ran).
    const demo = await runCli(['demo', '--fast'])
    assert.equal(demo.code, 2)
    assert.match(demo.stderr, /sluice demo takes no arguments, got "--fast"/)
    // An option a command does not take, or one without its value, is named as the CLI names its other slips.
    for (const [args, said] of [[['gateway', '--bogus'], 'sluice gateway: unknown option --bogus'], [['gateway', '--config'], 'sluice gateway: --config needs a value'], [['inspect', '-x', 'k'], 'sluice inspect: unknown option -x'], [['check-config', '--help=3'], 'sluice check-config: --help takes no value'], [['gateway', '--confg', 'x.yaml'], 'sluice gateway: unknown option --confg; did you mean "--config"?'], [['inspect', '--reddis', 'redis://127.0.0.1:1', 'k'], 'sluice inspect: unknown option --reddis; did you mean "--redis"?']] as const) {
      const slip = await runCli([...args])
      assert.equal(slip.code, 2, args.join(' '))
      assert.ok(slip.stderr.startsWith(`${said}\n\nusage: sluice ${args[0]}`), slip.stderr)
    }
  })
})

describe('a config read on a worker thread (as the gateway and the CLI read it)', () => {
  // The built module, as the gateway runs it: a worker loads its module beside it (from the sources, none can).
  const builtConfig = async () => (await import(new URL('../../dist/gateway/config.js', import.meta.url).href)) as typeof import('../../src/gateway/config.ts')

  it('is what loadConfig reads, its TLS files as Buffers, its environment references substituted; a wrong file gives the same problems', async () => {
    const built = await builtConfig()
    await inTempDir(async (dir) => {
      const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1',
        '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')], { encoding: 'utf8' })
      assert.equal(made.status, 0, made.stderr)
      writeFileSync(join(dir, 'keys.txt'), 'k1\nk2\n')
      const file = join(dir, 'sluice.yaml')
      writeFileSync(file, `
server: { listen: "127.0.0.1:\${PORT}", tls: { cert: cert.pem, key: key.pem } }
identity: { apiKey: { header: x-api-key, keysFile: keys.txt } }
routes:
  - name: api
    match: { path: /api/**, host: "*.example.test" }
    upstream: http://127.0.0.1:9
    limits:
      - { name: api, policies: { algorithm: token-bucket, capacity: "\${CAP}", refillTokens: 1, refillIntervalMs: 1000 } }
`)
      const env = { PORT: '0', CAP: '7' }
      const here = await built.loadConfig(file, env)
      const there = await built.loadConfigInWorker(file, env)
      assert.deepEqual(there, here)
      assert.ok(Buffer.isBuffer(there.tls?.cert) && Buffer.isBuffer(there.tls?.key))
      assert.equal(there.written.get('server.listen'), '127.0.0.1:${PORT}')
      writeFileSync(file, 'routes:\n  - { name: a, upstream: http://127.0.0.1:9, limits: [{ policies: { algorithm: fixed-window, limit: -5, windowMs: 1000 } }] }\n')
      const expected = await built.loadConfig(file, env).then(() => [], (error: InstanceType<typeof built.ConfigError>) => error.problems)
      assert.ok(expected.length > 0)
      await assert.rejects(built.loadConfigInWorker(file, env), (error) => error instanceof built.ConfigError && assert.deepEqual(error.problems, expected) === undefined)
    })
  })

  it('a file whose parsing outgrows the memory reading a config may use is refused, and only the worker ends (the process goes on)', async () => {
    const built = await builtConfig()
    await inTempDir(async (dir) => {
      const file = join(dir, 'sluice.yaml')
      // 2 MB of text, some hundreds of MB once parsed.
      writeFileSync(file, `routes: [${Array(1_000_000).fill('1').join(',')}]\n`)
      await assert.rejects(built.loadConfigInWorker(file, {}, { heapMb: 32 }), (error) => error instanceof built.ConfigError &&
        assert.deepEqual(error.problems, ['too large to read: parsing it took more than the 32 MB of memory reading a config may use (is it the right file?)']) === undefined)
      // The same limit reads a real config.
      assert.deepEqual(await built.loadConfigInWorker(example, {}, { heapMb: 32 }), await built.loadConfig(example, {}))
    })
  })

  it('check-config and the gateway refuse a file too large to parse with exit 1, not a crash of the process (a small heap here)', async () => {
    await inTempDir(async (dir) => {
      const file = join(dir, 'sluice.yaml')
      writeFileSync(file, `routes: [${Array(1_000_000).fill('1').join(',')}]\n`)
      // Read on this thread, the same file ends a process of this heap with V8's fatal out-of-memory error.
      const smallHeap = { NODE_OPTIONS: '--max-old-space-size=64' }
      for (const args of [['check-config', file], ['gateway', '--config', file]]) {
        const { code, stderr } = await runCli(args, smallHeap)
        assert.equal(code, 1, stderr)
        assert.match(stderr, /: 1 problem\n {2}- too large to read: parsing it took more than the \d+ MB of memory reading a config may use \(is it the right file\?\)/)
      }
    })
  })

  it('where no worker may be started (node\'s permission model without --allow-worker), the file is read on the main thread', async () => {
    const { code, stdout, stderr } = await runCli(['check-config', example], { NODE_OPTIONS: '--experimental-permission --allow-fs-read=*' })
    assert.equal(code, 0, stderr)
    assert.match(stdout, /sluice\.yaml: valid \(version [0-9a-f]+\): 3 routes/)
  })

  it('a file with a problem per element lists the first 100 and counts the rest, here and from the worker', async () => {
    const built = await builtConfig()
    await inTempDir(async (dir) => {
      const file = join(dir, 'sluice.yaml')
      writeFileSync(file, `routes: [${Array(1000).fill('1').join(',')}]\n`)
      for (const load of [built.loadConfig, built.loadConfigInWorker]) {
        await assert.rejects(load(file, {}), (error) => {
          assert.ok(error instanceof built.ConfigError)
          assert.equal(error.count, 1000)
          assert.equal(error.problems.length, 101)
          assert.equal(error.problems[99], 'routes[99]: expected object, got 1 (line 1)')
          assert.equal(error.problems[100], '900 more problems not listed: is it the right file?')
          assert.equal(error.message.split('\n')[0], `${file}: 1000 problems`)
          return true
        })
      }
    })
  })

  it('a config of thousands of routes comes back whole, in parts deserialized with the event loop turning between them', async () => {
    const built = await builtConfig()
    await inTempDir(async (dir) => {
      const file = join(dir, 'sluice.yaml')
      const routes = Array.from({ length: 1_200 }, (_, i) => `
  - name: svc${i}
    match: { path: /svc${i}/** }
    upstream: http://127.0.0.1:9
    limits:
      - { name: l${i}, policies: { algorithm: fixed-window, limit: ${i + 1}, windowMs: 1000 } }`).join('')
      writeFileSync(file, `limits:\n  - { name: all, policies: { algorithm: token-bucket, capacity: 9, refillTokens: 1, refillIntervalMs: 1000 } }\nroutes:${routes}\n`)
      const here = await built.loadConfig(file, {})
      assert.deepEqual(await built.loadConfigInWorker(file, {}), here)
      // 1,200 routes and 1,201 limits: a head and 3 + 3 parts of at most 500.
      const parts = configInParts(here)
      assert.equal(parts.length, 7)
      const { result, turns } = await turnsOfEventLoopDuring(() => configFromParts(parts))
      assert.deepEqual(result, here)
      assert.ok(turns >= 6, `the loop turned ${turns} times while 6 parts were deserialized`)
    })
  })

  it('from the TypeScript sources too (a loader that does not reach workers): loaded on the calling thread then', async () => {
    assert.deepEqual(await loadConfigOffThread(example), await loadConfig(example))
  })
})

describe('reloads asked for in a burst (SIGHUPs, saves)', () => {
  type GatewayModule = typeof import('../../src/gateway/gateway.ts')
  type InProcess = Awaited<ReturnType<GatewayModule['Gateway']['start']>>

  /** A gateway in this process on `yaml` (silent, no file watch), from `module`; closed and its directory removed after `body`. */
  async function withGateway(module: Promise<GatewayModule>, yaml: string, body: (gateway: InProcess, file: string) => Promise<void>): Promise<void> {
    const [{ Gateway }, { pino }] = await Promise.all([module, import('pino')])
    await inTempDir(async (dir) => {
      const file = join(dir, 'sluice.yaml')
      writeFileSync(file, yaml)
      const gateway = await Gateway.start(file, { logger: pino({ level: 'silent' }), watchFile: false })
      try {
        await body(gateway, file)
      } finally {
        await gateway.close()
      }
    })
  }

  /** sluice_config_reloads_total by result. */
  async function reloads(gateway: InProcess): Promise<{ applied: number; refused: number; unchanged: number }> {
    const metric = await gateway.metrics.registry.getSingleMetric('sluice_config_reloads_total')?.get()
    const count = (result: string) => metric?.values.find((value) => value.labels.result === result)?.value ?? 0
    return { applied: count('applied'), refused: count('refused'), unchanged: count('unchanged') }
  }

  it('read the file once more after the one in progress, not once each; one asked for during a read still reads again after it', async () => {
    const valid = (limit: number) => `
server: { listen: "127.0.0.1:0" }
admin: { listen: "127.0.0.1:0" }
routes:
  - { name: api, upstream: "http://127.0.0.1:9", limits: [{ name: api, policies: { algorithm: fixed-window, limit: ${limit}, windowMs: 1000 } }] }
`
    await withGateway(import('../../src/gateway/gateway.ts'), valid(1), async (gateway, file) => {
      writeFileSync(file, 'routes: [ { name: broken')
      const burst = Array.from({ length: 10 }, () => gateway.reload())
      assert.equal(new Set(burst).size, 1)
      await Promise.all(burst)
      assert.deepEqual(await reloads(gateway), { applied: 0, refused: 1, unchanged: 0 })

      // A read has begun when the file changes: the calls made after the change are not joined to it, but read again, once.
      writeFileSync(file, valid(5))
      const first = gateway.reload()
      await new Promise((resolve) => setImmediate(resolve))
      writeFileSync(file, valid(7))
      const later = [gateway.reload(), gateway.reload(), gateway.reload()]
      assert.notEqual(later[0], first)
      assert.equal(new Set(later).size, 1)
      await Promise.all([first, ...later])
      assert.equal((await reloads(gateway)).refused, 1)
      const limits = gateway.config.limitsResolved.flatMap((limit) => [...limit.policies.values()].flat().map((policy) => 'limit' in policy ? policy.limit : undefined))
      assert.deepEqual(limits, [7])
      // The same file again: nothing to apply, and counted (and logged) as such, not passed over in silence.
      const before = await reloads(gateway)
      await gateway.reload()
      assert.deepEqual(await reloads(gateway), { ...before, unchanged: before.unchanged + 1 })
    })
  })

  it('a gateway closing while it reads a new file ends the read instead of waiting for it', async () => {
    // The built module, as the gateway runs: a worker reads the file (from the sources it would be read on this thread).
    const built = import(new URL('../../dist/gateway/gateway.js', import.meta.url).href) as Promise<GatewayModule>
    const yaml = 'server: { listen: "127.0.0.1:0" }\nadmin: { listen: "127.0.0.1:0" }\nroutes: [{ name: api, upstream: "http://127.0.0.1:9" }]\n'
    await withGateway(built, yaml, async (gateway, file) => {
      // Seconds to parse, and refused at the end of it: a read that ran to its end would count a refusal.
      writeFileSync(file, `routes: [${Array(1_000_000).fill('1').join(',')}]\n`)
      const reloading = gateway.reload()
      await sleep(200)
      await gateway.close()
      // Ended at once; a read left to run would take seconds more.
      assert.equal(await Promise.race([reloading.then(() => 'ended'), sleep(2000).then(() => 'still reading')]), 'ended')
      const metric = await gateway.metrics.registry.getSingleMetric('sluice_config_reloads_total')?.get()
      assert.deepEqual(metric?.values.filter((value) => value.value > 0), [])
    })
  })
})
