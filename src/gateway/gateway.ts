/**
 * The sluice gateway: a rate-limiting reverse proxy configured by one YAML
 * file. Each request is matched to its route (first match wins), decided by
 * the HTTP layer's pipeline (global limits plus the route's own), then
 * forwarded to the route's upstream. A reload builds a new runtime and swaps
 * it in: requests in flight finish on the one they started with.
 */
import { realpathSync, watch, type FSWatcher } from 'node:fs'
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import { constants as http2Constants, createSecureServer as createHttp2Server, type Http2SecureServer, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2'
import type { AddressInfo, Server as NetServer, Socket } from 'node:net'
import type { Server as TlsServer, TLSSocket } from 'node:tls'
import type { Duplex } from 'node:stream'
import { basename, dirname } from 'node:path'
import { pino, type Logger } from 'pino'
import type { Agent } from 'undici'
import { isPromise } from '../core/callbacks.ts'
import type { Policy } from '../core/types.ts'
import { ITEMS_PER_SLICE, letIoIn, mapInSlices } from '../core/turn.ts'
import { FALLBACK_KEYS, Limiter } from '../limiter/limiter.ts'
import { authorityOf, boundUnreadBody, nodeRequest, responseOnSocket, waitTurn } from '../http/adapters/node.ts'
import { createRateLimitPipelineInSlices, httpStatePrefix, problem, type HttpOutcome, type HttpRequest, type KeyResolver, type RuleOptions } from '../http/handler.ts'
import { MemoryStore } from '../stores/memory/memory-store.ts'
import type { HeaderList } from '../http/headers.ts'
import { apiKey, claimOf, clientIpKey, firstOf, jwksKeys, jwtVerifier, type JwksKeys } from '../http/identity.ts'
import { clientAddressResolver, connectionClient, trustedProxyPeer, type HeaderReader } from '../http/client-ip.ts'
import { candidatesFor, candidatesForInSlices, compileMatch, methodReadings, overridesMethod, pathReadings, readsDifferently, type RequestMatch } from '../http/match.ts'
import { StoreCallFailures, type LatestStoreFailure } from '../limiter/store-failures.ts'
import { GatewayMetrics } from '../metrics/metrics.ts'
import type { DecisionOutcome } from '../metrics/tally.ts'
import type { Store } from '../stores/store.ts'
import { certificateDates, clientIpOptions, ConfigError, configWarnings, jwtOptions, loadConfigOffThread, type GatewayConfig, type ResolvedLimit } from './config.ts'
import type { IdentityKind, RouteConfig } from './config-schema.ts'
import { createAdminServer } from './admin.ts'
import { connectionTokens, createAgent, HOP_BY_HOP, forward, pathRewriter, respond, Upstreams, type PathRewrite, type Upgrade, type UpstreamFailure } from './proxy.ts'
import { openStore, type OpenedStore } from './store.ts'
import { compileCors, isPreflight, type Cors } from './cors.ts'

/** A request as the gateway's rules see it: the HTTP layer's view plus the route it was matched to. */
interface GatewayRequest extends HttpRequest {
  route: string
  /**
   * Set by the decision hook, for the access log: the kind of key (`ip`, `apikey`, `user`), never the key.
   * The client's own, not `everyone` (a quota all share) unless no other limit applied; a refusal's, once refused.
   */
  keyKind?: string
  /** Whether keyKind is a refusal's, which later decisions of the request leave as it is. */
  keyKindRefused?: boolean
  outcome?: DecisionOutcome
}

export interface CompiledRoute {
  config: RouteConfig
  matches: RequestMatch
  upstreams: Upstreams
  rewrite: PathRewrite
}

/** Everything built from one version of the config. */
interface Runtime {
  config: GatewayConfig
  routes: CompiledRoute[]
  /** The routes that may match a request, in order (see candidatesFor): a config of many routes is not tried route by route. */
  routesFor: (request: HttpRequest) => readonly CompiledRoute[]
  decide: ((request: HttpRequest) => HttpOutcome | Promise<HttpOutcome>) | undefined
  store: OpenedStore
  /** Request headers (lower case) that pick the client's key, tier, route or limits: see decidedBy. */
  decisionHeaders: ReadonlySet<string>
  /** The config's `cors`, compiled; undefined: CORS is the upstream's. */
  cors: Cors | undefined
  /** The client a connection is counted under for server.connections.perClient; undefined: not counted (a trusted proxy). */
  connectionClient: (remoteAddress: string | undefined) => string | undefined
  /** The client's address, through the trusted proxies, for the upstream's X-Real-IP. */
  clientAddress: (remoteAddress: string | undefined, header: HeaderReader) => string | undefined
  /** Whether a connection's peer is a trusted proxy, whose X-Forwarded-Proto, -Host, -Port and -Prefix are passed on. */
  fromTrustedProxy: (remoteAddress: string | undefined) => boolean
}

/** A watched key's quota under one policy, as /status shows it. */
export interface WatchedQuota {
  limit: number
  remaining: number | null
  resetAfterMs: number | null
  /** Why remaining is not known: the store's read failed (timeout, store-error, circuit-open). */
  unread?: string
}

/** What the runtimes of successive configs share. */
interface AcrossReloads {
  /** Failing store calls, reported once per failure while it lasts, across a reload too. */
  storeCalls: StoreCallFailures
  /** The counts of `store.onFailure: fallback`: a reload during an outage gives no client a fresh local share. */
  fallbackStore: MemoryStore
  /** `identity.jwt.jwksUrl`'s keys: a reload while the endpoint is down keeps verifying tokens with them. */
  jwks?: JwksKeys
}

export interface GatewayOptions {
  /** Where log lines go. Default: pino to stdout at the config's level. */
  logger?: Logger
  /** Reload when the file changes (SIGHUP always works through `reload()`). Default true. */
  watchFile?: boolean
  env?: NodeJS.ProcessEnv
}

export class Gateway {
  readonly metrics: GatewayMetrics
  readonly startedAt = Date.now()
  private runtime: Runtime
  /** HTTP, HTTPS, or HTTPS with HTTP/2 beside HTTP/1.1 (whose HTTP/1.1 connections node serves as an http.Server's). */
  private readonly server: Server | Http2SecureServer
  /** HTTP/2 connections, each carrying many requests: told to stop (GOAWAY) at shutdown. */
  private readonly sessions = new Set<ServerHttp2Session>()
  /** On an HTTP/2 listener, the connections that chose HTTP/1.1 (node tracks them itself on an http.Server). */
  private readonly http1Sockets = new Set<Duplex>()
  private readonly admin: Server
  private readonly agent: Agent
  /** Its pino logger: the admin listener reports through it too. */
  readonly logger: Logger
  private watchers: FSWatcher[] = []
  private watchedKey = ''
  private reloadTimer: NodeJS.Timeout | undefined
  private readonly probe: NodeJS.Timeout
  private inFlight = 0
  /** Upgraded (WebSocket) connections joined to their upstream, closed at shutdown. */
  private readonly tunnels = new Set<Duplex>()
  private draining = false
  private reloading: Promise<void> = Promise.resolve()
  private queuedReload: Promise<void> | undefined
  /** Ends a reload's reading of the file when the gateway closes. */
  private readonly closing = new AbortController()
  private storeUp = true
  private storeError: string | undefined
  /** Connections open per client, for server.connections.perClient (clients with none are not kept). */
  private readonly connectionsByClient = new Map<string, number>()
  /** Connections closed over a cap since the last warning, which comes at most every 10 s. */
  private connectionsRefused = { max: 0, perClient: 0, warnedAt: 0 }

  private constructor(runtime: Runtime, logger: Logger, metrics: GatewayMetrics, private readonly kept: AcrossReloads, private readonly options: GatewayOptions) {
    this.metrics = metrics
    this.runtime = runtime
    this.logger = logger
    metrics.servedCertificate(certificateEnd(runtime.config))
    const { server: serverConfig } = runtime.config
    this.agent = createAgent(serverConfig.timeouts.keepAliveMs)
    const listener = (req: IncomingMessage, res: ServerResponse) => { void this.handle(req, res) }
    const tls = runtime.config.tls
    if (tls === undefined) this.server = createHttpServer(listener)
    else if (serverConfig.tls?.http2 === true) this.server = http2Listener(tls, serverConfig.timeouts, listener, this.sessions, this.http1Sockets)
    else this.server = createHttpsServer({ cert: tls.cert, key: tls.key }, listener)
    // `Expect: 100-continue`: the client sends its body only once the request is allowed, so a refused upload never travels.
    this.server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => { void this.handle(req, res, true) })
    this.server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => { this.handleUpgrade(req, socket, head) })
    // A forward proxy's tunnel: not what a reverse proxy offers (without a listener node would just drop the connection).
    this.server.on('connect', (req: IncomingMessage, socketOrResponse: Socket | ServerResponse) => {
      const refusal = problem(405, 'Method Not Allowed', 'CONNECT is not supported: this is a reverse proxy.', [])
      // Over HTTP/2 a CONNECT is a stream like any request, and node hands over its response.
      if (req.httpVersionMajor >= 2) return respond(socketOrResponse as ServerResponse, refusal)
      const socket = socketOrResponse as Socket
      socket.on('error', () => socket.destroy())
      respond(responseOnSocket(req, socket), refusal)
    })
    // Read by node for HTTP/1.1 connections, on an HTTP/2 listener too.
    const http1 = this.server as Server
    this.server.on('connection', (socket: Socket) => { this.admitConnection(socket) })
    // Past maxConnections, node closes the connection itself, and says so.
    this.server.on('drop', () => { this.connectionRefused('max') })
    this.server.maxConnections = serverConfig.connections?.max ?? Infinity
    metrics.countConnections(() => new Promise((resolve) => { this.server.getConnections((error, count) => resolve(error === null ? count : 0)) }))
    http1.headersTimeout = serverConfig.timeouts.headersMs
    http1.requestTimeout = serverConfig.timeouts.requestMs
    http1.keepAliveTimeout = serverConfig.timeouts.keepAliveMs
    this.admin = createAdminServer(this)
    this.metrics.setDurationByRoute(runtime.config.admin.durationByRoute)
    this.metrics.configLoaded(runtime.config.version, undefined)
    this.probe = setInterval(() => { void this.probeStore() }, 1000)
    this.probe.unref()
    this.checkUpstreams(runtime)
    if (options.watchFile !== false) this.watchFiles(runtime.config.files)
  }

  /** Loads the file (a ConfigError lists every problem), opens the store and both listeners. */
  static async start(file: string, options: GatewayOptions = {}): Promise<Gateway> {
    const config = await loadConfigOffThread(file, options.env)
    const metrics = new GatewayMetrics()
    const logger = options.logger ?? pino({ level: config.logging.level, base: null }, logDestination(config.logging.bufferBytes, metrics))
    const store = await openStore(config, (message) => logger.warn(message))
    const kept: AcrossReloads = {
      storeCalls: new StoreCallFailures((failure) => logger.warn(failure, 'store call failed; the failure policy decides')),
      fallbackStore: new MemoryStore({ maxKeys: FALLBACK_KEYS }),
    }
    let gateway: Gateway
    try {
      gateway = new Gateway(await buildRuntime(config, store, metrics, logger, kept), logger, metrics, kept, options)
    } catch (error) {
      await store.close()
      throw error
    }
    // /readyz and /status tell the truth from the first request: a store down at start is seen before listening.
    await gateway.probeStore()
    await gateway.listen()
    return gateway
  }

  get config(): GatewayConfig {
    return this.runtime.config
  }

  get url(): string {
    return urlOf(this.server, this.runtime.config.tls !== undefined ? 'https' : 'http')
  }

  get adminUrl(): string {
    return urlOf(this.admin, 'http')
  }

  get isDraining(): boolean {
    return this.draining
  }

  /**
   * `up` and `error`: the health probe (PING). `failing`: what the latest
   * decision's store call failed with, undefined once one succeeds; a Redis can
   * answer PING and still refuse every decision (a read-only replica).
   * `refundsOwed`: refunds (of concurrency limits, `count` rules) the store
   * could not take; their units stay held until it can.
   */
  get store(): { type: string; up: boolean; error: string | undefined; failing: LatestStoreFailure | undefined; refundsOwed: number } {
    return { type: this.runtime.store.description, up: this.storeUp, error: this.storeError, failing: this.kept.storeCalls.current, refundsOwed: this.metrics.refundsOwed }
  }

  /**
   * Reads the file again. A valid file takes effect for the next request (those
   * in flight finish under the old one); an invalid one is refused, logged with
   * every problem, and the running config stays.
   */
  reload(): Promise<void> {
    // One reload at a time. One that has not begun yet reads the file as it is when it begins, so
    // later calls join it: a burst of SIGHUPs reads the file twice at most, not once per signal.
    if (this.queuedReload !== undefined) return this.queuedReload
    const queued = this.reloading.then(() => {
      this.queuedReload = undefined
      return this.reloadNow()
    }).catch((error: unknown) => {
      // Only a bug gets here; callers of reload() (a signal, a file watch) have nowhere to send it, and later reloads must still run.
      this.metrics.configRefused()
      this.logger.error({ err: error }, 'config reload failed')
    })
    this.queuedReload = queued
    this.reloading = queued
    return queued
  }

  /** Stops accepting, lets requests in flight finish (up to the config's shutdownMs), then closes everything. */
  async close(): Promise<void> {
    if (this.draining) return
    this.draining = true
    this.closing.abort()
    this.closeWatchers()
    clearInterval(this.probe)
    for (const route of this.runtime.routes) route.upstreams.stop()
    const deadline = Date.now() + this.runtime.config.server.timeouts.shutdownMs
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()))
    // HTTP/2 connections are told to take no new requests (GOAWAY) and close once theirs are answered.
    if ('closeIdleConnections' in this.server) this.server.closeIdleConnections()
    for (const session of this.sessions) session.close()
    while (this.inFlight > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
    const abandoned = this.inFlight
    // A WebSocket may stay open for hours: once the requests are done, its client is left to reconnect elsewhere.
    for (const side of this.tunnels) side.destroy()
    if ('closeAllConnections' in this.server) this.server.closeAllConnections()
    for (const session of this.sessions) session.destroy()
    for (const socket of this.http1Sockets) socket.destroy()
    await closed
    await new Promise<void>((resolve) => this.admin.close(() => resolve()))
    this.admin.closeAllConnections()
    await this.agent.close().catch(() => {})
    await this.runtime.store.close()
    this.logger.info({ abandoned }, abandoned === 0 ? 'sluice gateway stopped; every request finished' : 'sluice gateway stopped; requests cut at the shutdown deadline')
  }

  /** The routes of the config in use, in order, each with its upstreams and what the gateway knows of them (for /status). */
  get routes(): readonly CompiledRoute[] {
    return this.runtime.routes
  }

  /**
   * Remaining quota of each watched key under each policy that counts under
   * keys of its kind, read without charging; `remaining` and `resetAfterMs`
   * null, and `unread` why, where the store could not be read.
   */
  async watched(): Promise<Record<string, Record<string, WatchedQuota>>> {
    const { config, store } = this.runtime
    const result: Record<string, Record<string, WatchedQuota>> = {}
    if (config.admin.watch.length === 0) return result
    const limiterOf = await watchLimiters(this.runtime, store.store)
    for (const key of config.admin.watch) {
      const perPolicy: Record<string, WatchedQuota> = {}
      const limiters = partsCountingUnder(config, key).map(({ policies }) => limiterOf.get(policies) as Limiter)
      // A slice of peeks at a time: Redis answers them together, and requests are served between slices of the memory store's.
      for (let from = 0; from < limiters.length; from += ITEMS_PER_SLICE) {
        if (from > 0) await letIoIn()
        for (const decision of await Promise.all(limiters.slice(from, from + ITEMS_PER_SLICE).map((limiter) => limiter.peek(key)))) {
          for (const entry of decision.policies) {
            perPolicy[entry.policy] = decision.degraded
              ? { limit: entry.limit, remaining: null, resetAfterMs: null, unread: decision.reason ?? 'store-error' }
              : { limit: entry.limit, remaining: entry.remaining, resetAfterMs: entry.resetAfterMs }
          }
        }
      }
      result[key] = perPolicy
    }
    return result
  }

  /** Counts a new connection under its client, or closes it at once, unanswered, when the client already has server.connections.perClient open. */
  private admitConnection(socket: Socket): void {
    const cap = this.runtime.config.server.connections?.perClient
    if (cap === undefined) return
    const client = this.runtime.connectionClient(socket.remoteAddress)
    if (client === undefined) return
    const open = this.connectionsByClient.get(client) ?? 0
    if (open >= cap) {
      socket.destroy()
      this.connectionRefused('perClient')
      return
    }
    this.connectionsByClient.set(client, open + 1)
    socket.once('close', () => {
      const left = (this.connectionsByClient.get(client) ?? 1) - 1
      if (left > 0) this.connectionsByClient.set(client, left)
      else this.connectionsByClient.delete(client)
    })
  }

  /** Counted in the metrics; logged with how many, at most every 10 s (a flood of connections is not a flood of lines). */
  private connectionRefused(cap: 'max' | 'perClient'): void {
    this.metrics.connectionRefused(cap)
    const refused = this.connectionsRefused
    refused[cap]++
    const now = Date.now()
    if (now - refused.warnedAt < 10_000) return
    const { max, perClient } = this.runtime.config.server.connections ?? {}
    this.logger.warn({ refused: { max: refused.max, perClient: refused.perClient }, caps: { max, perClient } }, 'connections closed unanswered: over server.connections')
    this.connectionsRefused = { max: 0, perClient: 0, warnedAt: now }
  }

  private async listen(): Promise<void> {
    const { server, admin, written } = this.runtime.config
    await listenOn(this.server, server.listen.host, server.listen.port, 'server.listen', written.get('server.listen'))
    try {
      await listenOn(this.admin, admin.listen.host, admin.listen.port, 'admin.listen', written.get('admin.listen'))
    } catch (error) {
      this.server.close()
      await this.runtime.store.close()
      throw error
    }
    this.logger.info({ url: this.url, admin: this.adminUrl, version: this.runtime.config.version, store: this.runtime.store.description, routes: this.runtime.routes.length }, 'sluice gateway listening')
  }

  /**
   * A request with `Upgrade`, which node hands over with its connection. A
   * WebSocket upgrade is routed and limited as any request, then joined to the
   * upstream when the upstream agrees. Other protocols (h2c) are not
   * upgraded to: the request is answered as plain HTTP/1.1, as RFC 9110 7.8
   * allows, since an upgraded HTTP/2 connection would carry requests the
   * gateway never sees.
   */
  private handleUpgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    socket.on('error', () => socket.destroy())
    const res = responseOnSocket(req, socket)
    const websocket = /^\s*websocket\s*$/i.test(req.headers.upgrade ?? '')
    if (!websocket && (req.headers['transfer-encoding'] !== undefined || (req.headers['content-length'] ?? '0') !== '0')) {
      // node stops parsing at an Upgrade request's head, so its body cannot be read as one.
      respond(res, problem(400, 'Bad Request', `Upgrade to "${req.headers.upgrade ?? ''}" is not supported; send the request without Upgrade.`, []))
      return
    }
    const upgrade: Upgrade | undefined = websocket
      ? {
        protocol: 'websocket',
        socket,
        head,
        onTunnel: (client, upstream) => {
          for (const side of [client, upstream]) {
            this.tunnels.add(side)
            side.once('close', () => this.tunnels.delete(side))
          }
        },
      }
      : undefined
    void this.handle(req, res, false, upgrade)
  }

  private async handle(req: IncomingMessage, res: ServerResponse, expectsContinue = false, upgrade?: Upgrade): Promise<void> {
    const started = performance.now()
    this.inFlight++
    let finished = false
    const runtime = this.runtime
    // What lets a browser page on an allowed origin read the answer, whoever gives it.
    const corsFields = runtime.cors?.fieldsFor(req.headers.origin) ?? NO_FIELDS
    // The absolute form (`GET http://host/path`, RFC 9112 3.2.2: a server must accept it) names the host itself.
    const routable = toOriginForm(req)
    // nodeRequest normalizes the path (dot segments, empty segments): routes and limits see what the upstream will serve.
    const request = nodeRequest(req) as GatewayRequest
    let routeName = '(none)'
    let failure: { upstream: UpstreamFailure; upstreamUrl: string; upstreamError: string } | undefined
    let upgradedStatus: number | undefined
    const done = () => {
      if (finished) return
      finished = true
      this.inFlight--
      const seconds = (performance.now() - started) / 1000
      const status = upgradedStatus ?? (res.headersSent ? res.statusCode : 499)
      this.metrics.request(routeName, status, seconds)
      if (runtime.config.logging.access) {
        this.logger.info({
          route: routeName,
          method: req.method,
          status,
          keyKind: request.keyKind,
          decision: request.outcome ?? 'none',
          ms: Math.round(seconds * 10_000) / 10,
          ...failure,
        }, 'request')
      }
    }
    res.once('close', done)
    try {
      // HTTP/2 has no Connection field (its GOAWAY says as much): only an HTTP/1.1 connection is told.
      if (this.draining && req.httpVersionMajor < 2) res.setHeader('connection', 'close')
      if (!routable) {
        // `OPTIONS *`, or an absolute form that is not http(s): nothing a route can name.
        answerInstead(res, expectsContinue, problem(400, 'Bad Request', 'The request target must be a path or an http(s) URL.', []), corsFields)
        return
      }
      const transferCodings = req.headers['transfer-encoding']
      if (transferCodings !== undefined && !/^\s*chunked\s*$/i.test(transferCodings)) {
        // node takes off the chunked framing only; forwarded, a body still in another coding (gzip) would reach
        // the upstream without the field that says so. RFC 9112 6.1: 501, as nginx answers.
        answerInstead(res, expectsContinue, problem(501, 'Not Implemented', `The request's Transfer-Encoding "${transferCodings}" is not supported: send the body chunked, or with a Content-Length (a compressed body with Content-Encoding).`, []), corsFields)
        return
      }
      if (req.httpVersionMajor >= 2 && differsFromAuthority(req)) {
        // RFC 9113 8.3.1: malformed. Routes read one, and an upstream or cache behind us may read the other.
        answerInstead(res, expectsContinue, problem(400, 'Bad Request', 'The request\'s Host names another host than its :authority.', []), corsFields)
        return
      }
      if (repeatsHost(req.rawHeaders)) {
        // node keeps the first Host and drops the rest; an upstream or a cache behind us may pick another (RFC 9112 3.2: answer 400).
        answerInstead(res, expectsContinue, problem(400, 'Bad Request', 'The request carries more than one Host header.', []), corsFields)
        return
      }
      const hopByHop = decidedBy(req.headers.connection, runtime.decisionHeaders)
      if (hopByHop !== undefined) {
        // Dropped on the way (RFC 9110 7.6.1), the upstream would not see what the limit was decided on:
        // a made-up API key would buy a fresh quota and never be refused by the upstream.
        answerInstead(res, expectsContinue, problem(400, 'Bad Request', `The Connection header names ${hopByHop}, which this gateway reads to decide the request's limit; a hop-by-hop field would not reach the upstream. Send the request without it in Connection.`, []), corsFields)
        return
      }
      if (runtime.cors !== undefined && isPreflight(req)) {
        // Answered here: the upstream never sees it, and no limit is charged for what the browser asks on its own.
        answerInstead(res, expectsContinue, runtime.cors.preflight(req), NO_FIELDS)
        return
      }
      const route = routeFor(runtime.routesFor(request), request)
      if (route === AMBIGUOUS) {
        const why = readsDifferently(request)
          ? 'its path holds an encoded slash, a backslash or a ";"; send it as the path meant'
          : 'it is a POST that names another method in X-HTTP-Method-Override (or X-HTTP-Method, X-Method-Override, or a _method query parameter); send it with the method meant'
        answerInstead(res, expectsContinue, problem(400, 'Bad Request', `The request reads as different routes to different servers: ${why}.`, []), corsFields)
        return
      }
      if (route === undefined) {
        answerInstead(res, expectsContinue, problem(404, 'Not Found', 'No route matches this request.', []), corsFields)
        return
      }
      routeName = route.config.name
      request.route = routeName
      // Decided at once on the memory store: awaited only when it is a promise (each await is a tick per request).
      const decided = runtime.decide?.(request)
      const outcome = isPromise(decided) ? await decided : decided
      if (outcome !== undefined && !outcome.proceed) {
        answerInstead(res, expectsContinue, outcome, corsFields)
        return
      }
      if (outcome !== undefined && outcome.waitMs > 0 && !(await waitTurn(res, outcome.waitMs))) return
      if (expectsContinue) res.writeContinue()
      const forwarded = await forward(req, res, {
        path: request.path,
        dispatcher: this.agent,
        upstreams: route.upstreams,
        rewrite: route.rewrite,
        preserveHost: route.config.preserveHost ?? false,
        timeouts: { headersMs: route.config.timeoutMs ?? runtime.config.server.timeouts.upstreamMs, bodyMs: runtime.config.server.timeouts.upstreamBodyMs },
        protocol: runtime.config.tls !== undefined ? 'https' : 'http',
        clientAddress: runtime.clientAddress(request.remoteAddress, request.header),
        fromTrustedProxy: runtime.fromTrustedProxy(request.remoteAddress),
        extraHeaders: corsFields.length === 0 ? outcome?.headers ?? [] : [...outcome?.headers ?? [], ...corsFields],
        replacesCors: runtime.cors !== undefined,
        // Noted before the client is answered, so that the access log line, written as the response closes, carries it.
        onFailure: (kind, upstream, error, retried) => {
          if (retried) return this.metrics.upstreamRetry(routeName, upstream, kind)
          failure = { upstream: kind, upstreamUrl: upstream, upstreamError: error.message }
          this.metrics.upstreamFailure(routeName, kind)
        },
        ...(upgrade !== undefined ? { upgrade } : {}),
      })
      if (forwarded.status === 101 && upgrade !== undefined) {
        // The tunnel lives on, outside the requests in flight: the request itself is done.
        upgradedStatus = 101
        done()
        const tunnelClosed = this.metrics.tunnelOpened(routeName)
        // A WebSocket is in progress until its tunnel closes: a concurrency (in-flight) limit counts it till then.
        const closed = () => {
          tunnelClosed()
          outcome?.settle?.(101)
        }
        if (upgrade.socket.closed) closed()
        else upgrade.socket.once('close', closed)
      } else {
        // A client gone before the answer counts as a failure (499), as in the middleware.
        outcome?.settle?.(forwarded.status)
      }
    } catch (error) {
      // Only a bug gets here: answer rather than leave the client hanging.
      this.logger.error({ err: error, route: routeName }, 'request failed inside the gateway')
      if (!res.headersSent) answerInstead(res, expectsContinue, problem(500, 'Internal Server Error', 'The gateway failed to handle this request.', []), corsFields)
      else res.destroy()
    }
  }

  private async reloadNow(): Promise<void> {
    if (this.draining) return
    const current = this.runtime
    const refuse = (fields: { problems: readonly string[]; version?: string }, message = 'config refused; the running config stays') => {
      this.metrics.configRefused()
      this.logger.error(fields, message)
    }
    let config: GatewayConfig
    try {
      config = await loadConfigOffThread(current.config.file, this.options.env, { signal: this.closing.signal })
    } catch (error) {
      if (this.draining) return
      refuse({ problems: error instanceof ConfigError ? error.problems : [(error as Error).message], version: current.config.version })
      return
    }
    // A gateway that began to close while the file was read, a store opened or a runtime built takes none of them.
    if (this.draining) return
    // Even unchanged, the files may now be elsewhere (a Kubernetes volume's new `..data`).
    if (this.options.watchFile !== false) this.watchFiles(config.files)
    if (config.version === current.config.version) {
      // Said, so that a SIGHUP after saving another file than the one running is seen to have changed nothing.
      this.metrics.configUnchanged()
      this.logger.info({ version: config.version, file: config.file }, 'config unchanged: nothing to reload')
      return
    }
    const changed = (a: unknown, b: unknown) => JSON.stringify(a) !== JSON.stringify(b)
    // A renewed certificate applies to new connections; switching between HTTP and HTTPS needs a new listener.
    const tlsSwitch = (config.tls === undefined) !== (current.config.tls === undefined)
    const http2 = current.config.server.tls?.http2 ?? false
    const fixed = [
      ...(changed({ ...config.server, tls: undefined, connections: undefined }, { ...current.config.server, tls: undefined, connections: undefined }) ? ['server'] : []),
      ...(tlsSwitch ? ['server.tls'] : []),
      ...(!tlsSwitch && (config.server.tls?.http2 ?? false) !== http2 ? ['server.tls.http2'] : []),
      ...(changed(config.admin.listen, current.config.admin.listen) ? ['admin.listen'] : []),
      ...(config.logging.bufferBytes !== current.config.logging.bufferBytes ? ['logging.bufferBytes'] : []),
    ]
    const sameStore = !changed([config.store, config.prefix], [current.config.store, current.config.prefix])
    let store = current.store
    if (!sameStore) {
      try {
        store = await openStore(config, (message) => this.logger.warn(message))
      } catch (error) {
        refuse({ problems: [(error as Error).message] }, 'config refused: its store cannot be opened; the running config stays')
        return
      }
    }
    let next: Runtime
    try {
      next = await buildRuntime(config, store, this.metrics, this.logger, this.kept)
    } catch (error) {
      if (!sameStore) await store.close()
      refuse({ problems: [(error as Error).message] })
      return
    }
    if (this.draining) {
      if (!sameStore) await store.close()
      return
    }
    const renewTls = !tlsSwitch && config.tls !== undefined && changed(config.tls, current.config.tls)
    if (renewTls) {
      try {
        (this.server as TlsServer).setSecureContext(config.tls as { cert: Buffer; key: Buffer })
      } catch (error) {
        if (!sameStore) await store.close()
        refuse({ problems: [`server.tls: ${(error as Error).message}`] })
        return
      }
    }
    // Keep listeners and timeouts as they are: changing them needs a restart. The TLS pair is the renewed one, if any.
    const tlsFrom = renewTls ? config : current.config
    const tlsFiles = tlsFrom.server.tls === undefined ? undefined : { ...tlsFrom.server.tls, http2 }
    next.config = { ...next.config, server: { ...current.config.server, tls: tlsFiles, connections: config.server.connections }, admin: { ...next.config.admin, listen: current.config.admin.listen }, logging: { ...next.config.logging, bufferBytes: current.config.logging.bufferBytes }, tls: tlsFrom.tls }
    this.runtime = next
    this.metrics.servedCertificate(certificateEnd(next.config))
    this.server.maxConnections = config.server.connections?.max ?? Infinity
    this.metrics.setDurationByRoute(config.admin.durationByRoute)
    // The level of a logger the gateway made follows the file; one passed in is its owner's to set.
    if (this.options.logger === undefined) this.logger.level = config.logging.level
    for (const route of current.routes) route.upstreams.stop()
    this.checkUpstreams(next, current)
    this.metrics.configLoaded(config.version, current.config.version)
    if (!sameStore) {
      // Requests in flight may still be deciding on the old store: close it once they are done.
      const old = current.store
      setTimeout(() => { void old.close() }, current.config.server.timeouts.shutdownMs).unref()
      // /readyz, /status and sluice_store_up speak of the new store from now, not at the next probe.
      await this.probeStore()
    }
    this.logger.info({ version: config.version, previous: current.config.version, ...(fixed.length > 0 ? { needsRestart: fixed } : {}) }, 'config reloaded')
  }

  /**
   * Starts the active health checks of the routes that ask for them. After a
   * reload, a route checked on the same path as before keeps what its checks
   * found; the gauge keeps no series for upstreams no longer configured.
   */
  private checkUpstreams(runtime: Runtime, previous?: Runtime): void {
    this.metrics.forgetUpstreamHealth()
    const previousRoutes = new Map(previous?.routes.map((route) => [route.config.name, route]))
    for (const route of runtime.routes) {
      const name = route.config.name
      const before = previousRoutes.get(name)
      // One refusing connections stays passed over: a reload is no reason to try it again.
      if (before !== undefined) route.upstreams.inheritPassedOver(before.upstreams)
      const check = route.config.healthCheck
      if (check === undefined) continue
      if (before !== undefined && before.config.healthCheck?.path === check.path) route.upstreams.inheritHealth(before.upstreams)
      route.upstreams.startHealthChecks(check, this.agent, (upstream, healthy, reason) => {
        this.metrics.upstreamHealth(name, upstream, healthy)
        if (healthy) this.logger.info({ route: name, upstream }, 'upstream passes its health check again')
        else this.logger.warn({ route: name, upstream, reason }, 'upstream failed its health check; passed over until it passes')
      })
      for (const { url, healthy } of route.upstreams.states(true)) this.metrics.upstreamHealth(name, url, healthy ?? true)
    }
  }

  /**
   * Watches the config file and the files it names. Directories, not files:
   * editors and `mv` replace a file, which ends a watch on it. A symlinked file
   * is watched where it points too, and names starting with `..` are
   * Kubernetes' ConfigMap and Secret volumes swapping their `..data` link.
   */
  private watchFiles(files: readonly string[]): void {
    if (this.draining) return
    const names = new Map<string, Set<string>>()
    const add = (path: string) => {
      const dir = dirname(path)
      names.set(dir, (names.get(dir) ?? new Set()).add(basename(path)))
    }
    for (const file of files) {
      add(file)
      try {
        const target = realpathSync(file)
        if (target !== file) add(target)
      } catch {
        // Missing now: its directory is watched for it to appear.
      }
    }
    const key = JSON.stringify([...names].map(([dir, set]) => [dir, [...set].sort()]).sort())
    if (key === this.watchedKey) return
    // Files now elsewhere (a link moved) were read before these watchers existed: a reload reads them again once they do,
    // so a change made in between is not missed; one already pending is kept.
    const moved = this.watchedKey !== ''
    this.closeWatchers(!moved)
    this.watchedKey = key
    for (const [dir, watched] of names) {
      try {
        const watcher = watch(dir, (_event, name) => {
          if (name !== null && !watched.has(name) && !name.startsWith('..')) return
          this.reloadSoon()
        })
        watcher.on('error', () => {})
        watcher.unref()
        this.watchers.push(watcher)
      } catch {
        this.logger.warn({ dir }, 'cannot watch this directory for config changes; reload with SIGHUP')
      }
    }
    if (moved) this.reloadSoon()
  }

  private reloadSoon(): void {
    clearTimeout(this.reloadTimer)
    this.reloadTimer = setTimeout(() => { void this.reload() }, 100)
  }

  private closeWatchers(cancelReload = true): void {
    for (const watcher of this.watchers) watcher.close()
    this.watchers = []
    if (cancelReload) clearTimeout(this.reloadTimer)
  }

  private async probeStore(): Promise<void> {
    const { store } = this.runtime
    let timer: NodeJS.Timeout | undefined
    let error: string | undefined
    try {
      // The memory store is this process: up, whatever the store it replaced last said.
      if (store.store.ping !== undefined) {
        await Promise.race([
          store.store.ping(),
          new Promise((_resolve, reject) => { timer = setTimeout(() => reject(new Error('no answer within 1000 ms')), 1000) }),
        ])
      }
    } catch (failure) {
      error = (failure as Error).message
    } finally {
      clearTimeout(timer)
    }
    // A reload switched stores while this one was asked: what it answered says nothing of the store in use.
    if (this.runtime.store !== store) return
    if (error === undefined && !this.storeUp) this.logger.info('store reachable again')
    if (error !== undefined && this.storeUp) this.logger.warn({ error }, 'store unreachable')
    this.storeUp = error === undefined
    this.storeError = error
    this.metrics.storeHealth(this.storeUp)
  }
}

/** When the certificate a config serves ends, epoch ms; undefined without `server.tls`. */
function certificateEnd(config: GatewayConfig): number | undefined {
  return config.tls === undefined ? undefined : certificateDates(config.tls.cert)?.to
}

/**
 * stdout for the gateway's log, holding at most `bufferBytes` while it takes
 * nothing (a log reader stalled, a pipe full): pino's own destination holds
 * every line, and a gateway under attack writes a line per request, so its
 * memory would grow until the reader came back or the process was killed.
 * Lines beyond are dropped and counted in sluice_log_lines_dropped_total.
 */
function logDestination(bufferBytes: number, metrics: GatewayMetrics): ReturnType<typeof pino.destination> {
  const destination = pino.destination({ dest: 1, sync: false, maxLength: bufferBytes })
  destination.on('drop', () => metrics.logLineDropped())
  return destination
}

/**
 * Compiles routes and limits into the HTTP layer's rules: global limits match
 * every route, a route's limits its own. The requests waiting on this thread
 * are let in between its steps: on reload the old runtime serves them
 * meanwhile, and with thousands of routes each step takes tens of milliseconds.
 */
async function buildRuntime(config: GatewayConfig, store: OpenedStore, metrics: GatewayMetrics, logger: Logger, kept: AcrossReloads): Promise<Runtime> {
  const identity = config.identity
  const clientIp = clientIpOptions(config)
  const jwt = jwtOptions(config, config.jwtPublicKey)
  if (jwt?.jwksUrl !== undefined && kept.jwks?.url !== jwt.jwksUrl) kept.jwks = jwksKeys(jwt.jwksUrl, (message) => logger.warn(message))
  const verified = jwt === undefined ? undefined : jwtVerifier(jwt, { jwks: kept.jwks })
  const claim = identity.jwt?.claim ?? 'sub'
  const resolvers: Record<IdentityKind, KeyResolver | undefined> = {
    jwt: verified === undefined ? undefined : async (request) => {
      const value = claimOf(await verified(request), claim)
      return value === undefined ? undefined : `user:${value}`
    },
    apiKey: identity.apiKey === undefined ? undefined : apiKey(identity.apiKey.header, config.apiKeys === undefined ? {} : { keys: config.apiKeys }),
    ip: clientIpKey(clientIp),
    // One client that every request is: a limit keyed so is one quota all clients share (what the upstream can take).
    everyone: () => EVERYONE,
  }
  for (const warning of configWarnings(config)) logger.warn(warning)
  const defaultOrder = defaultOrderOf(config)
  const keyOf = (kinds: readonly IdentityKind[]): KeyResolver => {
    const chosen = kinds.map((kind) => resolvers[kind] as KeyResolver)
    return chosen.length === 1 ? (chosen[0] as KeyResolver) : firstOf(...chosen)
  }
  // With tiers.from: apiKey the tier is the key's listed one, known synchronously (see ruleOf).
  const listedTier = config.tiers?.from === 'apiKey' ? apiKeyTierOf(config) : undefined
  const tierOf = listedTier ?? tierResolver(config, verified)

  const rules: RuleOptions[] = await mapInSlices(config.limitsResolved, (limit) => ruleOf(limit, config, keyOf(limit.config.key ?? defaultOrder), tierOf, listedTier))
  const routes = await mapInSlices(config.routes, (route) => ({
    config: route,
    matches: compileMatch(route.match ?? {}, `route "${route.name}" match`, config.caseSensitive),
    upstreams: new Upstreams(route, (upstream, failure) => logger.warn({ route: route.name, upstream }, `upstream ${failure === 'closed' ? 'closed a connection without answering' : 'cannot be connected to'}; passed over for 10 s`)),
    rewrite: pathRewriter(route, config.caseSensitive),
  }))
  const failure = config.store.type === 'redis' ? config.store : undefined
  // A route's own header style, over the top-level one.
  const routeHeaders = new Map(config.routes.filter((route) => route.headers !== undefined).map((route) => [route.name, { ...config.headers, ...route.headers }]))
  await letIoIn()
  const rulesFor = rulesByRoute(config.limitsResolved, config.caseSensitive)
  await letIoIn()
  const decide = rules.length === 0 ? undefined : await createRateLimitPipelineInSlices({
    rules,
    store: store.store,
    prefix: config.prefix,
    headers: config.headers,
    shadow: config.shadow,
    ...(identity.emptyKey !== undefined ? { emptyKey: identity.emptyKey } : {}),
    ...(failure?.onFailure !== undefined ? { onStoreFailure: failure.onFailure } : {}),
    ...(failure?.timeoutMs !== undefined ? { storeTimeoutMs: failure.timeoutMs } : {}),
    ...(failure?.expectedInstances !== undefined ? { expectedInstances: failure.expectedInstances } : {}),
    observer: metrics.observer,
    onDecision: (event) => {
      const request = event.request as GatewayRequest
      const outcome = metrics.decision(request.route, event.decision, event.shadow)
      if (request.keyKindRefused !== true) {
        const kind = kindOf(event.key)
        const refused = !event.decision.allowed && !event.shadow
        if (refused || request.keyKind === undefined || request.keyKind === 'everyone') request.keyKind = kind
        request.keyKindRefused = refused
      }
      // The request's outcome: the first refusal (or degraded decision) wins over an allowance.
      if (request.outcome === undefined || request.outcome === 'allowed') request.outcome = outcome
    },
    onWarning: (message) => logger.warn(message),
  }, {
    storeFailures: kept.storeCalls,
    fallbackStore: kept.fallbackStore,
    rulesFor,
    ...(routeHeaders.size === 0 ? {} : { headersFor: (request: HttpRequest) => routeHeaders.get((request as GatewayRequest).route) }),
  })
  await letIoIn()
  const routesFor = await candidatesForInSlices(routes, (route) => route.config.match, config.caseSensitive)
  return { config, routes, routesFor, decide, store, decisionHeaders: decisionHeaders(config), cors: config.cors === undefined ? undefined : compileCors(config.cors), connectionClient: connectionClient(clientIp), clientAddress: clientAddressResolver(clientIp), fromTrustedProxy: trustedProxyPeer(clientIp) }
}

/**
 * The positions of the limits that may apply to a request: of those on its
 * route (every route's, the global limits, and its own), the ones whose own
 * `match` may take it (see candidatesFor), so that a route with a limit per
 * endpoint does not try each.
 */
function rulesByRoute(limits: readonly ResolvedLimit[], caseSensitive: boolean): (request: HttpRequest) => readonly number[] {
  const everywhere: number[] = []
  const byRoute = new Map<string, number[]>()
  limits.forEach((limit, index) => {
    if (limit.route === undefined) {
      everywhere.push(index)
      for (const positions of byRoute.values()) positions.push(index)
    } else {
      const positions = byRoute.get(limit.route) ?? [...everywhere]
      positions.push(index)
      byRoute.set(limit.route, positions)
    }
  })
  const lookUp = (positions: readonly number[]) => candidatesFor(positions, (index) => limits[index]?.config.match, caseSensitive)
  // Built for a route when its first request comes: a config of thousands of routes would otherwise build them all at once, on a reload while requests wait.
  const forRoute = new Map<string, (request: HttpRequest) => readonly number[]>()
  const elsewhere = lookUp(everywhere)
  return (request) => {
    const route = (request as GatewayRequest).route
    let found = forRoute.get(route)
    if (found === undefined) {
      const positions = byRoute.get(route)
      if (positions === undefined) return elsewhere(request)
      forRoute.set(route, found = lookUp(positions))
    }
    return found(request)
  }
}

/** The request headers the config reads to key, tier, route or limit a request, in lower case. */
function decisionHeaders(config: GatewayConfig): ReadonlySet<string> {
  const names: string[] = []
  if (config.identity.jwt !== undefined) names.push('authorization')
  if (config.identity.apiKey !== undefined) names.push(config.identity.apiKey.header)
  const tierFrom = config.tiers?.from
  if (tierFrom !== undefined && typeof tierFrom === 'object' && 'header' in tierFrom) names.push(tierFrom.header)
  for (const match of [...config.routes.map((route) => route.match), ...config.limitsResolved.map((limit) => limit.config.match)]) {
    names.push(...Object.keys(match?.headers ?? {}))
  }
  // Hop-by-hop fields never reach the upstream, and Host is always sent: Connection changes neither.
  return new Set(names.map((name) => name.toLowerCase()).filter((name) => !HOP_BY_HOP.has(name) && name !== 'host'))
}

/** The first header a `Connection` field names that the gateway decides on; undefined for none (nearly every request). */
function decidedBy(connection: string | string[] | undefined, decisionHeaders: ReadonlySet<string>): string | undefined {
  if (connection === undefined || decisionHeaders.size === 0) return undefined
  for (const name of connectionTokens(connection)) if (decisionHeaders.has(name)) return name
  return undefined
}

function ruleOf(
  limit: ResolvedLimit,
  config: GatewayConfig,
  key: KeyResolver,
  tierOf: ((request: HttpRequest) => string | undefined | Promise<string | undefined>) | undefined,
  listedTier: ((request: HttpRequest) => string | undefined) | undefined,
): RuleOptions {
  const within = limit.config.match === undefined ? undefined : compileMatch(limit.config.match, `limit "${limit.name}" match`, config.caseSensitive)
  const route = limit.route
  const match = route === undefined
    ? (within ?? (() => true))
    : within === undefined
      ? (request: HttpRequest) => (request as GatewayRequest).route === route
      : (request: HttpRequest) => (request as GatewayRequest).route === route && within(request)
  const tiered = limit.config.tiers !== undefined && config.tiers !== undefined && tierOf !== undefined
  // The tiers API keys are listed with were checked with the config: one this limit has no policies for is its default,
  // by design, not a client's made-up name to warn of.
  const ownTier = tiered && listedTier !== undefined
    ? (request: HttpRequest) => {
      const tier = listedTier(request)
      return tier !== undefined && limit.policies.has(tier) ? tier : undefined
    }
    : tierOf
  return {
    name: limit.name,
    match,
    ...(tiered && ownTier !== undefined
      ? { tiers: { of: ownTier, policies: Object.fromEntries(limit.policies), default: (config.tiers as NonNullable<GatewayConfig['tiers']>).default } }
      : { policies: limit.policies.get('') ?? [] }),
    key,
    cost: limit.cost,
    shadow: limit.config.shadow ?? config.shadow,
    ...(limit.config.action !== undefined ? { action: limit.config.action } : {}),
    ...(limit.config.maxWaitMs !== undefined ? { maxWaitMs: limit.config.maxWaitMs } : {}),
    ...(limit.config.count !== undefined ? { count: limit.config.count } : {}),
  }
}

/** The key of the identity kind `everyone`: one client that every request is. */
const EVERYONE = 'everyone'

/** Where a request's tier comes from (`tiers.from`) when it is a verified claim or a header (for apiKey, see apiKeyTierOf). */
function tierResolver(config: GatewayConfig, verified: ReturnType<typeof jwtVerifier> | undefined): ((request: HttpRequest) => string | undefined | Promise<string | undefined>) | undefined {
  const tierFrom = config.tiers?.from
  if (tierFrom === undefined || tierFrom === 'apiKey') return undefined
  if ('jwtClaim' in tierFrom) return async (request) => claimOf(await (verified as NonNullable<typeof verified>)(request), tierFrom.jwtClaim)
  const header = tierFrom.header.toLowerCase()
  return (request) => request.header(header)
}

/** The tier a request's API key is listed with (tiers.from: apiKey), read as the apiKey resolver reads the key: trimmed. */
function apiKeyTierOf(config: GatewayConfig): (request: HttpRequest) => string | undefined {
  const tiers = config.apiKeyTiers ?? new Map<string, string>()
  const header = (config.identity.apiKey?.header ?? 'x-api-key').toLowerCase()
  return (request) => {
    const key = request.header(header)?.trim()
    return key === undefined ? undefined : tiers.get(key)
  }
}

/** The identity kinds a limit without its own `key` is keyed by: `identity.order`, else each kind configured, then the IP. */
function defaultOrderOf(config: GatewayConfig): readonly IdentityKind[] {
  const { identity } = config
  return identity.order ?? [...(identity.jwt !== undefined ? ['jwt' as const] : []), ...(identity.apiKey !== undefined ? ['apiKey' as const] : []), 'ip' as const]
}

/** The kind of key (as kindOf names it) each identity kind gives. */
const KEY_KIND: Record<IdentityKind, string> = { jwt: 'user', apiKey: 'apikey', ip: 'ip', everyone: EVERYONE }

/**
 * The kinds of key a limit keyed by these identity kinds counts under: theirs,
 * and `anonymous` (the key of a request none of them resolves) unless the IP
 * or everyone always does.
 */
function keyKindsOf(kinds: readonly IdentityKind[]): Set<string> {
  const keyKinds = new Set(kinds.map((kind) => KEY_KIND[kind]))
  if (!kinds.includes('ip') && !kinds.includes('everyone')) keyKinds.add('anonymous')
  return keyKinds
}

/** A limit's policies for one tier (`''`: a limit without tiers). */
export interface LimitPart {
  limit: ResolvedLimit
  tier: string
  policies: Policy[]
}

/**
 * The parts of the config's limits that count under a key: a limit keyed by
 * IP never counts under apikey:…, nor a per-client one under everyone, and
 * where the key's tier is known (an API key's, under tiers.from: apiKey) only
 * that tier's policies do. Others' numbers for the key would be made up: a full quota
 * never used.
 */
export function partsCountingUnder(config: GatewayConfig, key: string): LimitPart[] {
  const kind = kindOf(key)
  const defaultOrder = defaultOrderOf(config)
  const tier = tierOfKey(config, key)
  const parts: LimitPart[] = []
  for (const limit of config.limitsResolved) {
    if (!keyKindsOf(limit.config.key ?? defaultOrder).has(kind)) continue
    // As a request is decided: a tier the limit has no policies for gets its default tier's.
    const own = tier === undefined ? undefined : limit.policies.has(tier) ? tier : config.tiers?.default
    for (const [name, policies] of limit.policies) if (name === '' || own === undefined || name === own) parts.push({ limit, tier: name, policies })
  }
  return parts
}

/**
 * A key's tier where the config says it: with tiers.from: apiKey, an API
 * key's listed one (else the default). Other keys (an IP, everyone) count
 * under the tier of whichever key each request carries: any.
 */
function tierOfKey(config: GatewayConfig, key: string): string | undefined {
  const tiers = config.tiers
  if (tiers?.from !== 'apiKey' || kindOf(key) !== 'apikey') return undefined
  return config.apiKeyTiers?.get(key.slice('apikey:'.length)) ?? tiers.default
}

/** Limiters over the same state as the rules' (one per limit and tier, by its policies), to read watched keys without charging them. */
const watchCache = new WeakMap<Runtime, Promise<Map<Policy[], Limiter>>>()
function watchLimiters(runtime: Runtime, store: Store): Promise<Map<Policy[], Limiter>> {
  let limiters = watchCache.get(runtime)
  if (limiters === undefined) {
    const prefix = httpStatePrefix(runtime.config.prefix)
    // A store that cannot be read leaves a quota unknown: no fallback's empty count stands in for it.
    limiters = mapInSlices(runtime.config.limitsResolved, (limit) => [...limit.policies.values()].map((policies) => [policies, new Limiter({ policies, prefix, store, blockCache: false, onStoreFailure: 'closed' })] as const))
      .then((perLimit) => new Map(perLimit.flat()))
    watchCache.set(runtime, limiters)
  }
  return limiters
}

const AMBIGUOUS = Symbol('ambiguous')

/**
 * The first route of `routes` (those that may match: see candidatesFor) that
 * matches the request; AMBIGUOUS where its path or method reads as another
 * one to some servers (see pathReadings, methodReadings) and the readings
 * pick different routes. Forwarded by the one, it could be served
 * as the other's, past the other's limits: `/static/..%2Flogin` is `/login` to
 * nginx, a POST with `X-HTTP-Method-Override: DELETE` a DELETE to Express's
 * method-override.
 */
function routeFor<R extends { matches: RequestMatch }>(routes: readonly R[], request: HttpRequest): R | undefined | typeof AMBIGUOUS {
  const route = routes.find((candidate) => candidate.matches(request))
  if (route === undefined) return route
  if (!readsDifferently(request) && !overridesMethod(request)) return route
  const methods = methodReadings(request)
  for (const path of pathReadings(request)) {
    for (const method of methods) {
      const chosen = routes.find((candidate) => candidate.matches.at(request, path, method))
      if (chosen !== undefined && chosen !== route) return AMBIGUOUS
    }
  }
  return route
}

/** What kind of key a request was limited by (`user`, `apikey`, `ip`), never the key: `anonymous` and `everyone` are whole keys. */
function kindOf(key: string): string {
  const colon = key.indexOf(':')
  return colon === -1 ? key : key.slice(0, colon)
}

/**
 * Rewrites an absolute-form request to the origin form (path and query) with
 * the target's authority as its Host, which RFC 9112 3.2.2 says replaces the
 * Host field sent; from there it is routed, limited and forwarded as if sent
 * that way. False for a target that is neither a path nor an http(s) URL.
 */
function toOriginForm(req: IncomingMessage): boolean {
  const target = req.url ?? '/'
  if (target.startsWith('/')) return true
  // The path is cut from the target as sent (URL would resolve its dots and re-encode it) and normalized like any other.
  const parts = /^https?:\/\/([^/?#]+)([^#]*)/i.exec(target)
  if (parts === null) return false
  const [, authority = '', rest = ''] = parts
  let host: string
  try {
    const url = new URL(`http://${authority}`)
    if (url.username !== '' || url.password !== '') return false
    host = url.host
  } catch {
    return false
  }
  req.url = rest.startsWith('/') ? rest : `/${rest}`
  req.headers.host = host
  return true
}

function repeatsHost(rawHeaders: readonly string[]): boolean {
  let seen = false
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string
    if (name.length !== 4 || name.toLowerCase() !== 'host') continue
    if (seen) return true
    seen = true
  }
  return false
}

const NO_FIELDS: HeaderList = []

/** The gateway's own answer, in the upstream's place, with the CORS fields that let a page read it. */
function answerInstead(res: ServerResponse, expectsContinue: boolean, outcome: HttpOutcome, corsFields: HeaderList): void {
  // A client still waiting for 100 Continue may send its body after this answer, or not: the connection cannot be
  // reused. (Over HTTP/2 only the stream is concerned, and the field does not exist.)
  if (expectsContinue && res.req.httpVersionMajor < 2) res.setHeader('connection', 'close')
  else boundUnreadBody(res.req, res)
  respond(res, corsFields.length === 0 ? outcome : { ...outcome, headers: [...outcome.headers, ...corsFields] })
}

/**
 * HTTPS offering HTTP/2 and HTTP/1.1 (ALPN). Its connections are tracked for
 * shutdown: HTTP/2 sessions in `sessions`, connections that chose HTTP/1.1 in
 * `http1Sockets` (an http.Server tracks its own).
 */
function http2Listener(
  tls: { cert: Buffer; key: Buffer },
  timeouts: { keepAliveMs: number; requestMs: number },
  listener: (req: IncomingMessage, res: ServerResponse) => void,
  sessions: Set<ServerHttp2Session>,
  http1Sockets: Set<Duplex>,
): Http2SecureServer {
  // At most 128 requests at once per connection, as nginx's http2_max_concurrent_streams (node allows 2^32 - 1).
  const server = createHttp2Server({ cert: tls.cert, key: tls.key, allowHTTP1: true, settings: { maxConcurrentStreams: 128 } }, listener as never)
  server.on('session', (session: ServerHttp2Session) => {
    sessions.add(session)
    session.once('close', () => sessions.delete(session))
    // Closed when idle, as a kept-alive HTTP/1.1 connection is: silent for keepAliveMs with no request open.
    // (node's server timeout would destroy it, requests and all, while a slow upstream keeps it silent.)
    let open = 0
    session.on('stream', (stream: ServerHttp2Stream) => {
      open++
      // requestMs, as node holds HTTP/1.1 requests to it: a request not wholly received by then (a client
      // trickling its body) is cancelled, so a slow client cannot keep a stream open forever.
      const cut = setTimeout(() => {
        if (!stream.endAfterHeaders && !stream.readableEnded) stream.close(http2Constants.NGHTTP2_CANCEL)
      }, timeouts.requestMs)
      cut.unref()
      stream.once('close', () => {
        open--
        clearTimeout(cut)
      })
    })
    session.setTimeout(timeouts.keepAliveMs, () => {
      if (open === 0) session.close()
    })
  })
  server.on('secureConnection', (socket: TLSSocket) => {
    if (socket.alpnProtocol === 'h2') return
    http1Sockets.add(socket)
    socket.once('close', () => http1Sockets.delete(socket))
  })
  return server
}

/** An HTTP/2 request whose Host field names another host than its `:authority`. */
function differsFromAuthority(req: IncomingMessage): boolean {
  const host = req.headers.host
  const authority = authorityOf(req)
  return host !== undefined && authority !== undefined && host.toLowerCase() !== authority.toLowerCase()
}

/** `written`: the field as the file writes it, where that holds environment references (`127.0.0.1:${PORT:-8080}`). */
function listenOn(server: NetServer, host: string, port: number, field: string, written?: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const variables = [...(written ?? '').matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)/g)].map((found) => found[1] as string)
    const how = variables.length === 0
      ? `give ${field} another port (0 picks a free one)`
      : `set ${variables.join(' or ')} to another port (${field} is written ${JSON.stringify(written)}; 0 picks a free one)`
    const inUse = (error: Error) => (error as NodeJS.ErrnoException).code === 'EADDRINUSE' ? `; another process listens there: stop it, or ${how}` : ''
    const onError = (error: Error) => reject(new Error(`cannot listen on ${host.includes(':') ? `[${host}]` : host}:${port} (${field}): ${error.message}${inUse(error)}`))
    server.once('error', onError)
    server.listen(port, host, () => {
      server.off('error', onError)
      resolve()
    })
  })
}

function urlOf(server: NetServer, protocol: string): string {
  const address = server.address() as AddressInfo | null
  if (address === null) return ''
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address
  return `${protocol}://${host}:${address.port}`
}

