/**
 * One narrow interface over the Redis clients sluice accepts, and a small shim
 * per driver. The store never looks at a driver again after this.
 */
import { describe, SluiceError, StoreNotAppliedError } from '../../core/errors.ts'
import { isIoredis, isNodeRedis } from './detect.ts'
import { LIMIT_FUNCTION, LIMIT_LIBRARY, LIMIT_SCRIPT, LIMIT_SHA } from './script.ts'

type AnyFunction = (...args: never[]) => unknown

/** An ioredis `Redis` or `Cluster` (standalone, Sentinel or Cluster). */
export interface IoredisClient {
  defineCommand: AnyFunction
  del: AnyFunction
  ping: AnyFunction
  info: AnyFunction
  quit: AnyFunction
}

/** A node-redis client or cluster (`createClient`, `createCluster`), v4 or later. */
export interface NodeRedisClient {
  evalSha: AnyFunction
  eval: AnyFunction
  del: AnyFunction
  ping: AnyFunction
  info: AnyFunction
}

export type RedisClient = IoredisClient | NodeRedisClient

/** What the store needs: run the limit script, delete keys, and close an owned connection. */
export interface ScriptRunner {
  /**
   * True for a cluster client: one script invocation may only touch one hash
   * slot, so calls are batched per user key (their keys share the hash tag).
   */
  readonly cluster: boolean
  runLimit(keys: string[], args: string[]): Promise<unknown>
  del(keys: string[]): Promise<unknown>
  ping(): Promise<unknown>
  /** `INFO` of one section, as Redis writes it (on a cluster, from one node). */
  info(section: string): Promise<unknown>
  quit(): Promise<void>
}

export interface RunnerOptions {
  /** Run the limit as a Redis function (FCALL) where the server allows it; else always EVALSHA. */
  functions: boolean
  /** Told once when `functions` is asked for and this Redis cannot have them. */
  onWarning: (message: string) => void
}

export function runnerFor(client: unknown, options: RunnerOptions): ScriptRunner {
  const runner = isIoredis(client) ? ioredisRunner(client, options) : isNodeRedis(client) ? nodeRedisRunner(client, options) : undefined
  if (runner === undefined) {
    const hint = typeof client === 'string' ? '; a URL goes in url: new RedisStore({ url })' : ''
    throw new SluiceError('ERR_SLUICE_REDIS_CLIENT', `client must be an ioredis Redis / Cluster or a node-redis client / cluster (got ${describe(client)})${hint}`)
  }
  // A client of the caller's has no tracked connection errors; Redis's own words are explained all the same.
  return explainingFailures(runner, connectionErrors.get(client as object) ?? (() => undefined))
}

interface ConnectionEvents {
  on(event: 'error', listener: (error: Error) => void): unknown
  on(event: 'ready' | 'connect' | 'close', listener: () => void): unknown
}

/**
 * Said of a connection Redis closed between opening and answering: the words
 * it sent, if any, are lost to the client, which was writing its first
 * command (`write EPIPE`, `read ECONNRESET`).
 */
const CLOSED_AS_OPENED = 'Redis closed the connection as it opened, before answering: it does so to a client over its maxclients (see INFO clients), to a client from elsewhere while in protected mode, and on a TLS port to a client that does not speak TLS'


/** For the connections sluice opens itself: the last error each reported since it was last ready. */
const connectionErrors = new WeakMap<object, () => string | undefined>()

/**
 * Listens to the 'error' events of a connection sluice owns. While it is down,
 * ioredis fails each command with words of its own ("Stream isn't writeable
 * and enableOfflineQueue options is false") that do not say why: the calls'
 * errors then also carry the connection's last error (`WRONGPASS ...`,
 * `connect ECONNREFUSED 127.0.0.1:6379`), which logs and /status show.
 */
export function trackConnectionErrors(client: ConnectionEvents, options: { tls?: boolean } = {}): void {
  let last: string | undefined
  let notRedis = false
  // Connected, and not yet ready: Redis has not answered the first command.
  let opening = false
  client.on('connect', () => { opening = true })
  client.on('close', () => { opening = false })
  client.on('error', (error: Error) => {
    // A server of another protocol also resets the connection it could not read: keep saying what it is.
    if (notRedis && /EPIPE|ECONNRESET/.test(String(error?.message))) return
    last = connectionErrorMessage(error, options)
    notRedis = isNotRedis(last)
    if (opening && !notRedis && /^(write EPIPE|read ECONNRESET)$/.test(last)) last = `${last} (${CLOSED_AS_OPENED})`
  })
  client.on('ready', () => {
    last = undefined
    notRedis = false
    opening = false
  })
  connectionErrors.set(client, () => last)
}

/**
 * What to say of a refused SELECT, which ioredis reports as an 'error' event
 * of the connection, which then goes on, on database 0; undefined for any
 * other error.
 */
export function selectRefusal(error: unknown): string | undefined {
  const command = (error as { command?: { name?: unknown } } | undefined)?.command
  if (!(error instanceof Error) || command?.name !== 'select') return undefined
  return `Redis refused to select the database the url names: ${error.message} (a server has the databases its redis.conf \`databases\` says, 16 by default; a cluster has only database 0)`
}

/**
 * ioredis and node-redis report a server that answers in another protocol
 * (a URL given an HTTP port, say) as a parser fault, `Unknown RESP type 72
 * "H". Please report this.`, which does not say that the URL is wrong.
 */
const NOT_RESP = /^Unknown RESP type \d+ "(.)"|^Protocol error, got "(.)" as reply type byte/s

const NOT_REDIS = 'not a Redis server'
/** Whether a message of `connectionErrorMessage` says the server speaks another protocol. */
export const isNotRedis = (message: string): boolean => message.startsWith(NOT_REDIS)

/**
 * A connection error's message, saying so where the server does not speak
 * Redis's protocol (or may not speak TLS), and with the last node's own error where an ioredis
 * Cluster reports only "Failed to refresh slots cache." (a seed node not in
 * cluster mode says why there).
 */
export function connectionErrorMessage(error: unknown, options: { tls?: boolean } = {}): string {
  const message = String((error as Error)?.message ?? error)
  // ioredis names a TLS handshake that never ends as it names a connection that never opens.
  if (options.tls === true && /^connect ETIMEDOUT/.test(message)) return `${message} (over TLS, as rediss:// asks: a server that does not speak TLS never completes the handshake; is this port the server's TLS port?)`
  const nodeError = (error as { lastNodeError?: unknown } | undefined)?.lastNodeError
  if (nodeError instanceof Error) return `${message} (the last node's error: ${connectionErrorMessage(nodeError)})`
  // Redis 7 answers a client that sent no password in words about HELLO, the command ioredis opens with.
  if (/^NOAUTH\b/.test(message)) return `${message} (${NO_PASSWORD_GIVEN})`
  // ioredis calls sentinels that answered, and know no such master, unreachable.
  if (/No such master with that name/.test(message)) return `${message} (${NO_SUCH_MASTER})`
  const notResp = NOT_RESP.exec(message)
  return (notResp === null ? undefined : notRedisMessage((notResp[1] ?? notResp[2]) as string)) ?? message
}

const NO_SUCH_MASTER = 'the sentinels answered, and monitor no master of the name given; SENTINEL MASTERS, asked of one of them, lists the names they do'

const NO_PASSWORD_GIVEN = 'this Redis asks for a password, by requirepass or an ACL user, and the client gave none: put it in the URL, redis://:PASSWORD@host:port or redis://USER:PASSWORD@host:port, or in the client\'s password option'

/** Whether a connection error says Redis refused the client's credentials, or wanted some: reached, and not let in. */
export const isRefusedSignIn = (message: string): boolean => /^(NOAUTH|WRONGPASS)\b/.test(message)

/** RESP2's and RESP3's reply types: the first byte of anything a Redis server sends. */
const RESP_TYPES = '+-:$*_#,(!=%~>|'

/** What to say of a server whose reply starts with `first`, or undefined if that is how Redis replies start. */
export function notRedisMessage(first: string): string | undefined {
  if (first.length !== 1 || RESP_TYPES.includes(first)) return undefined
  const printable = /^[\x21-\x7e]$/.test(first) ? `"${first}"` : `byte ${first.charCodeAt(0)}`
  return `${NOT_REDIS}: its reply starts with ${printable}${first === 'H' ? ', as an HTTP server\'s does' : ''}, which the Redis protocol never sends; check the host and port it connects to`
}

/** Redis refusing the command a decision runs by: renamed or disabled, the script text it echoes back cut off. */
const NO_SCRIPTING = /^ERR unknown command '(evalsha|eval|fcall)'(?:, with args beginning with: .*)?$/is

/** What to say of an error that says this Redis runs no scripts, or undefined for any other. */
function scriptingRefusal(message: string): string | undefined {
  const command = NO_SCRIPTING.exec(message)?.[1]
  if (command === undefined) return undefined
  return `ERR unknown command '${command}': this server runs no ${command.toUpperCase()}. Either it is a Sentinel (which runs no scripts: connect through it, with the gateway's store.sentinel or ioredis's sentinels option), or ${command.toUpperCase()} is renamed or disabled (rename-command in its redis.conf, or a managed Redis without Lua scripting). Each sluice decision is one script, and cannot be made without it${command === 'fcall' ? '' : '; with functions: true, FCALL is used where the server allows it'}.`
}

/** A MOVED that reaches sluice: ioredis's and node-redis's Cluster clients follow it, so the client is not one. */
const MOVED = /^MOVED \d+ \S+$/

/** What to say of Redis's refusal of a command, where its own words do not say what to do; undefined for the others. */
function commandRefusal(message: string): string | undefined {
  if (MOVED.test(message)) return `${message}: this Redis is a node of a Cluster, and the key's slot is on another node; connect to the Cluster as one (the gateway's store.cluster, ioredis's Redis.Cluster, node-redis's createCluster), not to one node by URL`
  return scriptingRefusal(message)
}

function explainingFailures(runner: ScriptRunner, connectionError: () => string | undefined): ScriptRunner {
  const explained = (error: unknown): never => {
    const refusal = error instanceof Error ? commandRefusal(error.message) : undefined
    if (refusal !== undefined) throw new Error(refusal, { cause: error })
    const why = connectionError()
    if (why === undefined || !(error instanceof Error) || error.message.includes(why)) throw error
    throw new Error(`${error.message} (the connection's last error: ${why})`, { cause: error })
  }
  return {
    cluster: runner.cluster,
    runLimit: (keys, args) => runner.runLimit(keys, args).catch(explained),
    del: (keys) => runner.del(keys).catch(explained),
    ping: () => runner.ping().catch(explained),
    info: (section) => runner.info(section).catch(explained),
    quit: () => runner.quit(),
  }
}

/**
 * What a client says when it never sent a command: ioredis with its offline
 * queue off while disconnected; node-redis closed, or offline with its queue
 * off. A connection that drops with a command in flight gives other words
 * ("Connection is closed.", "Reached the max retries per request limit",
 * "Socket closed unexpectedly", ECONNRESET): Redis may have run it.
 */
const NODE_REDIS_CLOSED = 'The client is closed'
const NEVER_SENT = ["Stream isn't writeable and enableOfflineQueue options is false", NODE_REDIS_CLOSED, 'The client is offline']

/**
 * Redis's refusals of a command it did not run: a replica's READONLY (a primary
 * demoted by a failover), LOADING, BUSY (another script running), MASTERDOWN,
 * CLUSTERDOWN, TRYAGAIN, MOVED, ASK, NOAUTH, NOPERM (an ACL that does not
 * allow the script, or its keys, checked before it runs), and the refusals of
 * a script's first write, and only its first, since a script is never stopped
 * halfway: OOM (past maxmemory under noeviction), MISCONF (a snapshot that
 * failed, under stop-writes-on-bgsave-error) and NOREPLICAS (fewer replicas
 * than min-replicas-to-write). The script writes only after all its reads
 * and checks, so a refused first write leaves nothing behind either.
 */
const REFUSED = /^(READONLY|LOADING|BUSY|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|MOVED|ASK|NOAUTH|NOPERM|OOM|MISCONF|NOREPLICAS) /

/**
 * The error a failed call rejects with: a `StoreNotAppliedError` where the
 * client or Redis says the call did nothing (a refund that met it can safely
 * be given again), else the client's own error (named for what it is where
 * the server does not speak Redis's protocol).
 */
export function asStoreFailure(error: unknown): unknown {
  for (let cause = error, depth = 0; cause instanceof Error && depth < 4; cause = cause.cause, depth++) {
    const { message } = cause
    if (NEVER_SENT.some((words) => message.startsWith(words)) || REFUSED.test(message)) {
      // node-redis says "The client is closed" of a client never connected too: say what to do.
      const said = (error as Error).message
      return new StoreNotAppliedError(said === NODE_REDIS_CLOSED ? `${said} (a node-redis client takes commands only while connected: await client.connect() before the first decision)` : said, { cause: error })
    }
  }
  // A client of yours on a port that is not Redis's fails its calls with the parser's words.
  if (error instanceof Error && NOT_RESP.test(error.message)) return new Error(connectionErrorMessage(error), { cause: error })
  return error
}

/**
 * Whether the client re-sends the commands that were in flight when its
 * connection dropped (ioredis's default, `autoResendUnfulfilledCommands`): a
 * decision that Redis had already made would then be made, and charged, twice.
 */
export function resendsAfterReconnect(client: unknown): boolean {
  if (!isIoredis(client)) return false
  const { options, isCluster } = client as { options?: { autoResendUnfulfilledCommands?: boolean; redisOptions?: { autoResendUnfulfilledCommands?: boolean } }; isCluster?: boolean }
  const setting = isCluster === true ? options?.redisOptions?.autoResendUnfulfilledCommands : options?.autoResendUnfulfilledCommands
  return setting !== false
}

/** The three ways a driver runs the limit. */
interface LimitCalls {
  /** EVALSHA, and EVAL where the server has lost the script (NOSCRIPT). */
  script(keys: string[], args: string[]): Promise<unknown>
  /** FCALL of this version's function. */
  fcall(keys: string[], args: string[]): Promise<unknown>
  /** FUNCTION LOAD of this version's library, on every primary. */
  loadLibrary(): Promise<void>
}

/** FCALL did not run: this node lacks the library (never loaded, a restart without persistence, FUNCTION FLUSH, a node new to the cluster). */
const FUNCTION_MISSING = /^ERR Function not found/
/** This Redis (before 7.0, or a managed one) or this user (ACL) can have no functions: scripts from then on. */
const NO_FUNCTIONS = /^(ERR unknown command|NOPERM|ERR unknown subcommand)/
const LIBRARY_LOADED = /^ERR Library '[^']*' already exists/
/** After a load that failed for other reasons (a full Redis, a lost connection), the next try waits this long. */
const LOAD_RETRY_MS = 1000

function messageOf(error: unknown): string {
  return String((error as Error)?.message ?? error)
}

/**
 * `runLimit` by FCALL, the library loaded on first need. Until it is loaded, or
 * on a node that lacks it, a call runs as a script instead: FCALL of a missing
 * function runs nothing, so no call is decided twice. Where functions cannot be
 * had at all, every call is a script, and the user is told once.
 */
function preferringFunctions(calls: LimitCalls, warn: (message: string) => void): ScriptRunner['runLimit'] {
  let scriptsOnly = false
  let loading = false
  // While a load is under way or after one failed, calls go straight to the script: a
  // call that tried FCALL first would pay two round trips.
  let nextLoadAt = 0
  const giveUp = (why: string): void => {
    if (scriptsOnly) return
    scriptsOnly = true
    warn(`sluice: functions were asked for, but this Redis cannot run them (${why}); each decision runs as a script (EVALSHA) instead.`)
  }
  const load = (): void => {
    if (loading) return
    loading = true
    calls.loadLibrary().then(
      () => { loading = false },
      (error: unknown) => {
        loading = false
        const message = messageOf(error)
        if (NO_FUNCTIONS.test(message)) giveUp(message)
        else nextLoadAt = Date.now() + LOAD_RETRY_MS
      },
    )
  }
  return async (keys, args) => {
    if (scriptsOnly || loading || (nextLoadAt !== 0 && Date.now() < nextLoadAt)) return calls.script(keys, args)
    try {
      return await calls.fcall(keys, args)
    } catch (error) {
      const message = messageOf(error)
      if (FUNCTION_MISSING.test(message)) load()
      else if (NO_FUNCTIONS.test(message)) giveUp(message)
      else throw error
      return calls.script(keys, args)
    }
  }
}

/** Loads the library with `load`, a library already there (another instance loaded it) being loaded. */
async function loadOnce(load: () => Promise<unknown>): Promise<void> {
  try {
    await load()
  } catch (error) {
    if (!LIBRARY_LOADED.test(messageOf(error))) throw error
  }
}

function limitRunner(calls: LimitCalls, options: RunnerOptions): ScriptRunner['runLimit'] {
  return options.functions ? preferringFunctions(calls, options.onWarning) : calls.script
}

/**
 * ioredis: `defineCommand` sends EVALSHA, falls back to EVAL on NOSCRIPT and
 * retries by itself, and on a Cluster routes by the first key (as it does
 * FCALL). The command name carries the script's hash, so two sluice versions
 * on one client never clash.
 */
function ioredisRunner(client: IoredisClient, options: RunnerOptions): ScriptRunner {
  const name = `sluiceLimit${LIMIT_SHA.slice(0, 12)}`
  const commands = client as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>
  if (typeof commands[name] !== 'function') {
    (client.defineCommand as (name: string, definition: { lua: string }) => void).call(client, name, { lua: LIMIT_SCRIPT })
  }
  const del = client.del as (...keys: string[]) => Promise<unknown>
  const ping = client.ping as () => Promise<unknown>
  const info = client.info as (section: string) => Promise<unknown>
  const quit = client.quit as () => Promise<unknown>
  const cluster = (client as { isCluster?: unknown }).isCluster === true
  type Caller = { call(...args: unknown[]): Promise<unknown> }
  const runLimit = limitRunner({
    script: (keys, args) => (commands[name] as (...a: unknown[]) => Promise<unknown>).call(client, keys.length, ...keys, ...args),
    fcall: (keys, args) => (client as unknown as Caller).call('FCALL', LIMIT_FUNCTION, keys.length, ...keys, ...args),
    async loadLibrary() {
      const nodes = cluster ? (client as unknown as { nodes(role: 'master'): Caller[] }).nodes('master') : [client as unknown as Caller]
      await Promise.all(nodes.map((node) => loadOnce(() => node.call('FUNCTION', 'LOAD', LIMIT_LIBRARY))))
    },
  }, options)
  return {
    cluster,
    runLimit,
    del: (keys) => del.apply(client, keys),
    ping: () => ping.call(client),
    info: (section) => info.call(client, section),
    quit: async () => { await quit.call(client) },
  }
}

/**
 * node-redis: EVALSHA; on NOSCRIPT (restart, failover, SCRIPT FLUSH) one EVAL,
 * which also caches the script on the node that serves the key. (A SCRIPT LOAD
 * on a cluster would reach a random node.)
 */
function nodeRedisRunner(client: NodeRedisClient, options: RunnerOptions): ScriptRunner {
  type Eval = (script: string, options: { keys: string[]; arguments: string[] }) => Promise<unknown>
  type Loader = { functionLoad(code: string): Promise<unknown> }
  const evalSha = client.evalSha as Eval
  const evalScript = client.eval as Eval
  const del = client.del as (keys: string[]) => Promise<unknown>
  const ping = client.ping as () => Promise<unknown>
  const info = client.info as (section: string) => Promise<unknown>
  const closer = client as unknown as { close?: () => Promise<unknown>; quit?: () => Promise<unknown> }
  // node-redis clusters (createCluster) expose their master nodes; plain clients do not.
  const cluster = 'masters' in (client as object)
  const runLimit = limitRunner({
    async script(keys, args) {
      try {
        return await evalSha.call(client, LIMIT_SHA, { keys, arguments: args })
      } catch (error) {
        if (!String((error as Error)?.message).startsWith('NOSCRIPT')) throw error
        return await evalScript.call(client, LIMIT_SCRIPT, { keys, arguments: args })
      }
    },
    fcall: (keys, args) => (client as unknown as { fCall: Eval }).fCall(LIMIT_FUNCTION, { keys, arguments: args }),
    async loadLibrary() {
      if (!cluster) return loadOnce(() => (client as unknown as Loader).functionLoad(LIMIT_LIBRARY))
      const nodes = client as unknown as { masters: unknown[]; nodeClient(node: unknown): Promise<Loader> | Loader }
      await Promise.all(nodes.masters.map(async (master) => {
        const node = await nodes.nodeClient(master)
        await loadOnce(() => node.functionLoad(LIMIT_LIBRARY))
      }))
    },
  }, options)
  return {
    cluster,
    runLimit,
    del: (keys) => del.call(client, keys),
    ping: () => ping.call(client),
    info: (section) => info.call(client, section),
    quit: async () => {
      if (typeof closer.close === 'function') await closer.close.call(client)
      else if (typeof closer.quit === 'function') await closer.quit.call(client)
    },
  }
}
