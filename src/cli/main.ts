#!/usr/bin/env node
/**
 * The `sluice` command: the gateway, config checking, key inspection, and
 * small tools (policy check, algorithm demo). Exit codes: 0 success, 1 the
 * input was wrong (a bad config or policy), 2 bad usage, 3 could not run
 * (a port in use, Redis unreachable).
 */
import { connect as connectTcp } from 'node:net'
import { readFileSync, realpathSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { commandLineProblem, maskCredentials, messageOf, PolicyError, SluiceError } from '../core/errors.ts'
import { policyProblems, resolvePolicies } from '../core/policy.ts'
import { didYouMean, withHint } from '../core/suggest.ts'
import type { Policy } from '../core/types.ts'
import { Limiter } from '../limiter/limiter.ts'
import { canonicalKey, ConfigError, configWarnings, loadConfigOffThread, type GatewayConfig } from '../gateway/config.ts'
import { startDemoUpstream } from '../gateway/demo-upstream.ts'
import { Gateway, partsCountingUnder } from '../gateway/gateway.ts'
import { httpStatePrefix, type HttpRequest } from '../http/handler.ts'
import { compileMatch } from '../http/match.ts'
import { LIMITER_CLIENT_OPTIONS, RedisStore, redisKey } from '../stores/redis/redis-store.ts'
import { connectionErrorMessage, isNotRedis, isRefusedSignIn, notRedisMessage, selectRefusal } from '../stores/redis/clients.ts'
import { redisUrlProblem } from '../stores/redis/url.ts'
import { simulateCommand, SIMULATE_USAGE } from '../simulate/command.ts'

const USAGE = `usage: sluice <command> [options]

commands:
  gateway --config FILE          run the rate-limiting gateway (see sluice gateway --help)
  check-config FILE              validate a gateway config; list every problem with its line
  inspect --redis URL KEY        show a key's state in Redis for each policy
  check '<policy JSON>'          validate one policy or an array of them; print them resolved
  demo                           replay a burst through each algorithm on a virtual clock
  simulate [--pattern NAME]      replay a traffic shape or a CSV through policies: table,
                                 SVG timelines, HTML report (see sluice simulate --help)
  version                        print the version
  help [COMMAND]                 print this text, or a command's own usage

exit codes: 0 ok, 1 invalid input (config, policy), 2 bad usage, 3 could not run
`

const GATEWAY_USAGE = `usage: sluice gateway --config FILE [--demo-upstream]

Runs the gateway the YAML file describes. SIGHUP (or saving the file) reloads
it: a valid file takes effect without dropping requests, an invalid one is
refused and the running config stays. SIGTERM / SIGINT stop accepting, let
requests in flight finish (server.timeouts.shutdownMs), then exit.

options:
  -c, --config FILE     the config file (required)
  --demo-upstream       also start the bundled demo upstream on a free loopback
                        port, exported as UPSTREAM_PORT for the config (npm start)
  --no-watch            reload on SIGHUP only, not on file changes
  -h, --help            print this text
`

const CHECK_CONFIG_USAGE = `usage: sluice check-config FILE
       sluice check-config --config FILE   (the flag gateway takes)

Validates a gateway config and lists every problem as "path: problem (line N)".
Exit code 0 when the file is valid, 1 when it is not, 2 on bad usage.
`

const INSPECT_USAGE = `usage: sluice inspect --redis URL [--config FILE] [--prefix PREFIX] KEY

Shows what Redis holds for KEY (e.g. ip:203.0.113.7, apikey:abc, user:42).
With --config, reads the config's policies that count under KEY without
charging (remaining, limit, reset). Without it, lists the raw state of every
policy under the prefix. On a Redis Cluster, any one node's URL will do.

options:
  --redis URL       redis:// or rediss:// URL (required)
  --config FILE     a gateway config: show remaining quota per policy
  --prefix PREFIX   the config's prefix (default: sluice, or the config's)
  -h, --help        print this text
`

type Out = (line: string) => void

export async function main(argv: readonly string[], out: Out = console.log, err: Out = console.error): Promise<number> {
  const [command, ...rest] = argv
  switch (command) {
    case undefined:
      // No command is a mistake of usage (a script that lost its argument), not a request for help.
      err(`sluice: expected a command\n\n${USAGE}`)
      return 2
    case 'help':
    case '--help':
    case '-h':
      return help(rest, out, err)
    case 'version':
    case '--version':
      if (rest.length > 0) return takesNoArguments('version', rest, err)
      out(version())
      return 0
    case 'check':
      return check(rest, out)
    case 'simulate':
      return simulateCommand(rest, out, err)
    case 'demo':
      if (rest.length > 0) return takesNoArguments('demo', rest, err)
      demo(out)
      return 0
    case 'gateway':
      return gateway(rest, out, err)
    case 'check-config':
      return checkConfig(rest, out, err)
    case 'inspect':
      return inspect(rest, out, err)
    default:
      err(`${withHint(`sluice: unknown command ${JSON.stringify(command)}`, didYouMean(command, COMMANDS))}\n\n${USAGE}`)
      return 2
  }
}

/** The usage of the commands that have options of their own; the others are told in USAGE. */
const COMMAND_USAGE: Readonly<Record<string, string>> = { gateway: GATEWAY_USAGE, 'check-config': CHECK_CONFIG_USAGE, inspect: INSPECT_USAGE, simulate: SIMULATE_USAGE }
const COMMANDS: ReadonlySet<string> = new Set([...Object.keys(COMMAND_USAGE), 'check', 'demo', 'version', 'help'])

/** `sluice help [COMMAND]`: the usage, or a command's own, as `sluice COMMAND --help` prints it. */
function help(args: readonly string[], out: Out, err: Out): number {
  const [command, ...extra] = args
  if (command !== undefined && (!COMMANDS.has(command) || extra.length > 0)) {
    err(`sluice help: ${COMMANDS.has(command) ? `expected one COMMAND, got ${quoted(args)}` : `unknown command ${JSON.stringify(command)}`}\n\n${USAGE}`)
    return 2
  }
  out((command === undefined ? undefined : COMMAND_USAGE[command]) ?? USAGE)
  return 0
}

function takesNoArguments(command: string, args: readonly string[], err: Out): number {
  err(`sluice ${command} takes no arguments, got ${quoted(args)}\n\n${USAGE}`)
  return 2
}

const quoted = (args: readonly string[]): string => args.map((arg) => JSON.stringify(arg)).join(' ')

/** Parses options; on a mistake prints it with the usage and returns undefined. */
function options<R>(command: string, parse: () => R, usage: string, err: Out): R | undefined {
  try {
    return parse()
  } catch (error) {
    err(`sluice ${command}: ${commandLineProblem(error, usage)}\n\n${usage}`)
    return undefined
  }
}

async function gateway(args: readonly string[], out: Out, err: Out): Promise<number> {
  const parsed = options('gateway', () => parseArgs({
    args: [...args],
    allowPositionals: true,
    options: {
      config: { type: 'string', short: 'c' },
      'demo-upstream': { type: 'boolean' },
      'no-watch': { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  }), GATEWAY_USAGE, err)
  if (parsed === undefined) return 2
  if (parsed.values.help === true) {
    out(GATEWAY_USAGE)
    return 0
  }
  const file = parsed.values.config
  if (typeof file !== 'string' || parsed.positionals.length > 0) {
    err(`sluice gateway: ${typeof file !== 'string' ? '--config FILE is required' : `unexpected argument ${JSON.stringify(parsed.positionals[0])}`}\n\n${GATEWAY_USAGE}`)
    return 2
  }
  const env = { ...process.env }
  let upstream: Awaited<ReturnType<typeof startDemoUpstream>> | undefined
  if (parsed.values['demo-upstream'] === true) {
    upstream = await startDemoUpstream(0)
    env.UPSTREAM_PORT = String(new URL(upstream.url).port)
  }
  let running: Gateway
  try {
    running = await Gateway.start(file, { env, watchFile: parsed.values['no-watch'] !== true })
  } catch (error) {
    upstream?.server.close()
    if (error instanceof ConfigError) {
      err(`sluice gateway: refusing to start\n${error.message}`)
      return 1
    }
    err(`sluice gateway: ${(error as Error).message}`)
    return 3
  }
  if (upstream !== undefined) {
    out([
      '',
      `  sluice gateway   ${running.url}   (config ${file})`,
      `  demo upstream    ${upstream.url}`,
      `  admin            ${running.adminUrl}/status   ${running.adminUrl}/metrics`,
      '',
      ...tryIt(running.config, running.url),
      '',
    ].join('\n'))
  }
  return new Promise<number>((resolve) => {
    const reload = () => { void running.reload() }
    const stop = () => {
      process.off('SIGHUP', reload)
      running.close().then(
        () => { upstream?.server.close(); resolve(0) },
        (error: Error) => { err(`sluice gateway: shutdown failed: ${error.message}`); resolve(3) },
      )
    }
    process.on('SIGHUP', reload)
    process.once('SIGTERM', stop)
    process.once('SIGINT', stop)
  })
}

async function checkConfig(args: readonly string[], out: Out, err: Out): Promise<number> {
  const parsed = options('check-config', () => parseArgs({ args: [...args], allowPositionals: true, options: { config: { type: 'string', short: 'c' }, help: { type: 'boolean', short: 'h' } } }), CHECK_CONFIG_USAGE, err)
  if (parsed === undefined) return 2
  if (parsed.values.help === true) {
    out(CHECK_CONFIG_USAGE)
    return 0
  }
  // Whoever just ran `sluice gateway --config FILE` checks the same file the same way.
  const files = [...(parsed.values.config === undefined ? [] : [parsed.values.config]), ...parsed.positionals]
  if (files.length !== 1) {
    err(`sluice check-config: expected one FILE, got ${files.length === 0 ? 'none' : files.map((file) => JSON.stringify(file)).join(', ')}\n\n${CHECK_CONFIG_USAGE}`)
    return 2
  }
  try {
    const config = await loadConfigOffThread(files[0] as string)
    const policies = config.limitsResolved.reduce((n, limit) => n + [...limit.policies.values()].reduce((m, list) => m + list.length, 0), 0)
    for (const warning of configWarnings(config)) err(`warning: ${warning}`)
    out(`${config.file}: valid (version ${config.version}): ${config.routes.length} route${config.routes.length === 1 ? '' : 's'}, ${config.limitsResolved.length} limit${config.limitsResolved.length === 1 ? '' : 's'}, ${policies} polic${policies === 1 ? 'y' : 'ies'}, store ${config.store.type}`)
    return 0
  } catch (error) {
    if (error instanceof ConfigError) {
      err(error.message)
      return 1
    }
    throw error
  }
}

async function inspect(args: readonly string[], out: Out, err: Out): Promise<number> {
  const parsed = options('inspect', () => parseArgs({
    args: [...args],
    allowPositionals: true,
    options: {
      redis: { type: 'string' },
      config: { type: 'string' },
      prefix: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  }), INSPECT_USAGE, err)
  if (parsed === undefined) return 2
  if (parsed.values.help === true) {
    out(INSPECT_USAGE)
    return 0
  }
  const url = parsed.values.redis
  const given = parsed.positionals[0]
  if (typeof url !== 'string' || given === undefined || parsed.positionals.length !== 1) {
    err(`sluice inspect: ${typeof url !== 'string' ? '--redis URL is required' : 'expected one KEY'}\n\n${INSPECT_USAGE}`)
    return 2
  }
  const urlProblem = redisUrlProblem(url)
  if (urlProblem !== undefined) {
    err(`sluice inspect: --redis ${urlProblem} (got ${maskCredentials(JSON.stringify(url))})`)
    return 2
  }
  let config: GatewayConfig | undefined
  if (parsed.values.config !== undefined) {
    try {
      config = await loadConfigOffThread(parsed.values.config)
    } catch (error) {
      if (error instanceof ConfigError) {
        err(error.message)
        return 1
      }
      throw error
    }
  }
  // An IPv6 client's quota is kept under its network (ip:2001:db8:1::/56): read that, and say so.
  const key = canonicalKey(given, config?.identity.clientIp?.ipv6Prefix) ?? given
  if (key !== given) out(`${given} is kept as ${key}`)
  const prefix = httpStatePrefix(parsed.values.prefix ?? config?.prefix)
  const { Redis } = await import('ioredis')
  // The store's own connection settings (nothing re-sent after a reconnect: no warning to give), connecting once and failing fast.
  const client = new Redis(url, { ...LIMITER_CLIENT_OPTIONS, lazyConnect: true, connectTimeout: 1000, commandTimeout: 2000, retryStrategy: () => null })
  // The first error says why, except after a server of another protocol: the reset that may come first does not.
  let cause: string | undefined
  let refusedSelect: string | undefined
  client.on('error', (error: Error) => {
    refusedSelect = selectRefusal(error) ?? refusedSelect
    const message = connectionErrorMessage(error, { tls: url.startsWith('rediss:') })
    if (cause === undefined || isNotRedis(message)) cause = message
  })
  try {
    await client.connect()
  } catch (error) {
    // A server of another protocol closes on the client's first commands, whose writes then fail
    // before its answer is read: ask it once more, to say what it is.
    if (cause === undefined || /EPIPE|ECONNRESET/.test(cause)) cause = (await notRedisAt(url)) ?? cause
    const why = cause ?? connectionErrorMessage(error)
    err(`sluice inspect: ${isRefusedSignIn(why) ? 'cannot sign in to' : 'cannot reach'} ${maskCredentials(url)}: ${why}`)
    client.disconnect()
    return 3
  }
  if (refusedSelect !== undefined) {
    // The connection went on, on database 0: what it would show is another database's.
    err(`sluice inspect: ${maskCredentials(url)}: ${refusedSelect}`)
    client.disconnect()
    return 3
  }
  // A Sentinel answers as Redis does, and holds no keys: every read would fail, or find nothing.
  if (/^redis_mode:sentinel/m.test(await client.info('server').then(String, () => ''))) {
    err(`sluice inspect: ${maskCredentials(url)} is a Redis Sentinel, which holds no keys: give the URL of the master it names (SENTINEL GET-MASTER-ADDR-BY-NAME <name>, asked of it, says where that is)`)
    client.disconnect()
    return 3
  }
  // A Cluster node holds its own slots only: a key in another's would read as never seen. Through the Cluster, every node.
  let cluster: import('ioredis').Cluster | undefined
  try {
    cluster = await clusterOf(client, url)
  } catch (error) {
    err(`sluice inspect: ${maskCredentials(url)} is a Cluster node, and the Cluster cannot be reached through it: ${messageOf(error)}`)
    client.disconnect()
    return 3
  }
  try {
    const store = new RedisStore({ client: cluster ?? client })
    if (config !== undefined) {
      out(`${key} under ${config.file} (read without charging):`)
      // Only the limits (and tiers) that count under a key of this kind: the others would show a quota never used.
      const parts = partsCountingUnder(config, key)
      if (parts.length === 0) out('  no limit of this config counts under keys of this kind')
      for (const { limit, tier, policies } of parts) {
        // A read that fails is said to: no fallback's empty count stands in for the quota (a user whose ACL runs no scripts read "full").
        let failure = ''
        const observer = { storeCall: (_ms: number, _outcome: string, error?: Error) => { if (error !== undefined) failure = error.message } }
        const decision = await new Limiter({ policies, prefix, store, blockCache: false, onStoreFailure: 'closed', observer }).peek(key)
        if (decision.degraded) {
          err(`sluice inspect: reading ${key} from ${maskCredentials(url)} failed (${decision.reason ?? 'store-error'}): ${failure === '' ? 'the store could not be read' : failure}`)
          return 3
        }
        for (const entry of decision.policies) {
          // A window that has not begun still has a reset ahead; with nothing spent, it is full now.
          const refill = entry.remaining >= entry.limit ? 'full' : `full in ${entry.resetAfterMs} ms`
          out(`  ${limit.name}${tier === '' ? '' : ` [tier ${tier}]`}  ${entry.policy}: ${entry.remaining}/${entry.limit} left, ${refill}${entry.allowed ? '' : `, refusing for ${entry.retryAfterMs} ms`}`)
        }
      }
      return 0
    }
    // No config: every state key of this client key, raw.
    const head = redisKey(prefix, key, '')
    const pattern = `${head.replace(/[*?[\]\\]/g, '\\$&')}*`
    // A key's state keys share its hash tag, so one node holds them all; on a Cluster, which one is its slot's: each master is asked.
    const found: Array<[string, import('ioredis').Redis]> = []
    for (const node of cluster?.nodes('master') ?? [client]) {
      let cursor = '0'
      do {
        const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000)
        cursor = next
        for (const stateKey of keys) found.push([stateKey, node])
      } while (cursor !== '0' && found.length < 1000)
    }
    if (found.length === 0) {
      out(`${key}: no state under prefix ${prefix} (never seen, or expired)`)
      return 0
    }
    for (const [stateKey, node] of found.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      const policy = stateKey.slice(head.length)
      const [type, ttl] = await Promise.all([node.type(stateKey), node.pttl(stateKey)])
      const value = type === 'zset' ? await describeLog(node, stateKey) : type === 'string' ? describeState(String(await node.get(stateKey))) : type
      out(`  ${policy}: ${value} (expires in ${ttl} ms)`)
    }
    return 0
  } catch (error) {
    // Redis refusing a read (an ACL without it, a server gone): its words, not a stack trace.
    err(`sluice inspect: reading ${key} from ${maskCredentials(url)} failed: ${messageOf(error)}`)
    return 3
  } finally {
    if (cluster !== undefined) await cluster.quit().catch(() => cluster?.disconnect())
    await client.quit().catch(() => client.disconnect())
  }
}

/**
 * The Cluster `client`'s node belongs to, connected through it with the
 * URL's credentials; undefined for a Redis not in cluster mode.
 */
async function clusterOf(client: import('ioredis').Redis, url: string): Promise<import('ioredis').Cluster | undefined> {
  const info = await client.info('cluster').catch(() => '')
  if (!/^cluster_enabled:1/m.test(info)) return undefined
  const { Cluster } = await import('ioredis')
  const { protocol, hostname, port, username, password } = new URL(url)
  const cluster = new Cluster([{ host: hostname.replace(/^\[|\]$/g, ''), port: Number(port || 6379) }], {
    lazyConnect: true,
    enableOfflineQueue: false,
    clusterRetryStrategy: () => null,
    redisOptions: {
      ...LIMITER_CLIENT_OPTIONS,
      connectTimeout: 1000,
      commandTimeout: 2000,
      ...(username !== '' ? { username: decodeURIComponent(username) } : {}),
      ...(password !== '' ? { password: decodeURIComponent(password) } : {}),
      ...(protocol === 'rediss:' ? { tls: {} } : {}),
    },
  })
  cluster.on('error', () => {})
  await cluster.connect()
  return cluster
}

/** Whether a plain `redis://` URL's server answers a PING as Redis does not (undefined: it does, or says nothing in 1 s). */
function notRedisAt(url: string): Promise<string | undefined> {
  const { protocol, hostname, port } = new URL(url)
  if (protocol !== 'redis:') return Promise.resolve(undefined)
  return new Promise((resolve) => {
    const socket = connectTcp({ host: hostname.replace(/^\[|\]$/g, ''), port: Number(port || 6379) }, () => socket.write('PING\r\n'))
    const done = (first?: string) => {
      socket.destroy()
      resolve(first === undefined ? undefined : notRedisMessage(first))
    }
    socket.setTimeout(1000, () => done())
    socket.once('data', (data: Buffer) => done(data.toString('latin1', 0, 1)))
    socket.once('error', () => done())
    socket.once('close', () => done())
  })
}

/** A string state names its algorithm by its first letter (see lua/limit.lua). */
function describeState(value: string): string {
  // A policy's block (blockMs): until when it refuses the key.
  if (/^B\d+$/.test(value)) return `blocked until ${new Date(Number(value.slice(1))).toISOString()}`
  const algorithm = ({ F: 'fixed-window', W: 'sliding-window', T: 'token-bucket', L: 'leaky-bucket' } as Record<string, string>)[value[0] ?? '']
  return algorithm === undefined ? `${value} (not a state sluice writes: read as none)` : `${algorithm} state ${value.slice(1)}`
}

/** A sliding log as the Lua script keeps it: members 'running total:cost' (see lua/limit.lua). */
async function describeLog(client: import('ioredis').Redis, key: string): Promise<string> {
  const [count, oldest, newest] = await Promise.all([client.zcard(key), client.zrange(key, '0', '0'), client.zrange(key, '-1', '-1')])
  const parse = (member: string | undefined) => /^(\d+):(\d+)$/.exec(member ?? '')?.slice(1).map(Number)
  const [first, last] = [parse(oldest[0]), parse(newest[0])]
  if (first === undefined || last === undefined) return `${count} log entries`
  const units = (last[0] as number) - (first[0] as number) + (first[1] as number)
  return `${units} units logged in ${count} entries (some may have left the window)`
}

function check(args: readonly string[], out: (line: string) => void): number {
  if (args.length !== 1) {
    out(`sluice check: expected one argument, a policy as JSON\n\n${USAGE}`)
    return 2
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(args[0] as string)
  } catch (error) {
    // The policy is the input, as a config file is to check-config: malformed input is exit 1.
    out(`sluice check: not valid JSON: ${(error as Error).message}`)
    return 1
  }
  try {
    out(JSON.stringify(resolvePolicies(parsed), null, 2))
    return 0
  } catch (error) {
    if (!(error instanceof SluiceError)) throw error
    // Every problem of every policy, as check-config lists a file's; a problem of the list itself (two policies of one name) alone.
    const list = Array.isArray(parsed) ? parsed : [parsed]
    const problems = error instanceof PolicyError
      ? list.flatMap((policy, i) => policyProblems(policy).map((problem) => (Array.isArray(parsed) ? `[${i}] ${problem.message}` : problem.message)))
      : []
    if (problems.length <= 1) out(`sluice check: ${problems[0] ?? error.message}`)
    else out(`sluice check: ${problems.length} problems\n${problems.map((problem) => `  - ${problem}`).join('\n')}`)
    return 1
  }
}

/** Twelve calls at 100 ms intervals, then four more after a pause, against each algorithm. */
function demo(out: (line: string) => void): void {
  const policies: Policy[] = [
    { algorithm: 'fixed-window', limit: 5, windowMs: 1000 },
    { algorithm: 'sliding-log', limit: 5, windowMs: 1000 },
    { algorithm: 'sliding-window', limit: 5, windowMs: 1000 },
    { algorithm: 'token-bucket', capacity: 5, refillTokens: 5, refillIntervalMs: 1000 },
    { algorithm: 'leaky-bucket', capacity: 5, leakTokens: 5, leakIntervalMs: 1000 },
    { algorithm: 'leaky-bucket', capacity: 5, leakTokens: 5, leakIntervalMs: 1000, mode: 'shape' },
  ]
  const times = [...Array.from({ length: 12 }, (_, i) => 500 + i * 100), 2400, 2410, 2420, 2430]
  out('Each row: one policy (5 per second); each column: a call at the time shown (ms).')
  out('  + allowed   . refused   ~ allowed after a wait\n')
  out(`${'policy'.padEnd(44)}${times.map((t) => String(t).padStart(5)).join('')}`)
  for (const policy of policies) {
    let now = 0
    const limiter = new Limiter({ policies: policy, clock: () => now })
    const marks = times.map((t) => {
      now = t
      const decision = limiter.limitSync('demo')
      return (decision.allowed ? (decision.waitMs > 0 ? '~' : '+') : '.').padStart(5)
    })
    out(`${(limiter.policies[0]?.name ?? '').padEnd(44)}${marks.join('')}`)
  }
}

/**
 * The demo banner's "try it", read from the config the gateway runs rather than
 * assumed: a GET that some route takes (the first route a plain GET reaches,
 * preferring one with limits), and how many such requests from one client its
 * limits let through at once. An edited example still prints what is true.
 */
export function tryIt(config: GatewayConfig, url: string): string[] {
  const host = new URL(url).host
  const get = (path: string): HttpRequest => ({ method: 'GET', path, host, header: () => undefined, remoteAddress: '127.0.0.1' })
  const routes = config.routes.map((route) => ({ name: route.name, matches: compileMatch(route.match ?? {}, `route "${route.name}" match`, config.caseSensitive) }))
  // `/api/**` -> `/api/hello`: the demo upstream answers /hello.
  const samples = config.routes.flatMap((route) => [route.match?.path ?? '/**'].flat().map((pattern) => pattern.replace(/\*\*?/g, 'hello')))
  const taken = samples.flatMap((path) => {
    const route = routes.find((candidate) => candidate.matches(get(path)))
    return route === undefined ? [] : [{ path, route: route.name, burst: burstOf(config, route.name, get(path)) }]
  })
  const pick = taken.find((sample) => sample.burst !== undefined) ?? taken[0]
  if (pick === undefined) return [`  try it:  curl -i ${url}/`]
  const target = `${url}${pick.path}`
  if (pick.burst === undefined) return [`  try it (GET ${pick.path} goes to route "${pick.route}", which no limit covers):`, `    curl -i ${target}`]
  const ordinal = (n: number) => `${n}${n % 100 >= 11 && n % 100 <= 13 ? 'th' : ['th', 'st', 'nd', 'rd'][n % 10] ?? 'th'}`
  const lines = [`  try it (GET ${pick.path} goes to route "${pick.route}", whose limits let ${pick.burst} request${pick.burst === 1 ? '' : 's'} from one client through at once; the ${ordinal(pick.burst + 1)} gets 429):`]
  if (pick.burst <= 20) lines.push(`    for i in $(seq ${pick.burst + 2}); do curl -s -o /dev/null -w "%{http_code} " ${target}; done; echo`)
  lines.push(`    curl -i ${target}`)
  return lines
}

/** Requests one fresh client can send one after another before a limit on `route` refuses one: undefined when none refuses (shadow, queued, counting failures or requests in progress only). */
function burstOf(config: GatewayConfig, route: string, request: HttpRequest): number | undefined {
  let burst: number | undefined
  for (const limit of config.limitsResolved) {
    if (limit.route !== undefined && limit.route !== route) continue
    if (config.shadow || limit.config.shadow === true || limit.config.action === 'queue' || limit.config.count === 'failed' || limit.config.count === 'in-flight') continue
    if (limit.config.match !== undefined && !compileMatch(limit.config.match, `limit "${limit.name}" match`, config.caseSensitive)(request)) continue
    const policies = limit.policies.get(config.tiers?.default ?? '') ?? limit.policies.get('') ?? []
    for (const policy of policies) {
      const capacity = 'limit' in policy ? policy.limit : policy.capacity
      burst = Math.min(burst ?? Infinity, Math.floor(capacity / limit.cost))
    }
  }
  return burst
}

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
  return pkg.version
}

/** True when this file is the program (also through npm's bin symlink), not an import. */
function invokedDirectly(): boolean {
  const script = process.argv[1]
  if (script === undefined) return false
  try {
    return realpathSync(script) === realpathSync(fileURLToPath(import.meta.url))
  } catch {
    return false
  }
}

if (invokedDirectly()) {
  // A reader that stops early (`sluice simulate --json | head`) closes the pipe. A Unix tool dies of SIGPIPE then,
  // quietly, exit status 141; node ignores the signal and threw EPIPE from an 'error' event, with a stack trace.
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE') throw error
      process.exit(128 + 13)
    })
  }
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code
      // A command is done when main resolves; a client library's leftover timer (ioredis after a refused connection) must not hold the exit.
      setTimeout(() => process.exit(code), 100).unref()
    },
    (error: unknown) => {
      console.error(error)
      process.exitCode = 3
    },
  )
}
