/**
 * Forwards one request to an upstream with undici and streams the answer back:
 * bodies flow both ways with backpressure (nothing is buffered whole),
 * hop-by-hop headers stay on their hop, `X-Forwarded-*` tell the upstream who
 * asked, and upstream failures become 502 (unreachable, closed without an
 * answer) or 504 (too slow); a response cut short is cut short for the client too.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Http2ServerRequest } from 'node:http2'
import type { Socket } from 'node:net'
import { PassThrough, type Duplex } from 'node:stream'
import { Agent, errors, type Dispatcher } from 'undici'
import { authorityOf } from '../http/adapters/node.ts'
import { problem, type HttpOutcome } from '../http/handler.ts'
import { draft6, draft7, legacy, type HeaderLookup } from '../client/headers.ts'
import { TOKEN } from '../http/match.ts'
import { requestQuery } from '../http/path.ts'
import type { RouteConfig } from './config-schema.ts'

/** RFC 9110 7.6.1: meaningful for one connection only, never forwarded. */
export const HOP_BY_HOP: ReadonlySet<string> = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade'])

const NONE: ReadonlySet<string> = new Set()

/**
 * Request fields a client writes that upstreams believe: `X-Original-URL`
 * and `X-Rewrite-URL` (IIS, older Symfony and Zend) name a path to serve in
 * place of the one the gateway routed and limited; `X-Real-IP` is the
 * gateway's to write.
 */
const NOT_PASSED_ON: ReadonlySet<string> = new Set(['x-original-url', 'x-rewrite-url', 'x-real-ip'])

/**
 * Fields a proxy writes of the hop the client made to it, passed on from a
 * trusted proxy only (as Traefik does): the port, a path prefix to build
 * links under, and the other ways frameworks read the scheme (Rack reads
 * `X-Forwarded-Ssl: on` as https before it reads X-Forwarded-Proto).
 */
const FROM_PROXIES_ONLY: ReadonlySet<string> = new Set(['x-forwarded-port', 'x-forwarded-prefix', 'x-forwarded-ssl', 'x-forwarded-scheme', 'x-url-scheme', 'front-end-https'])

export interface UpstreamTimeouts {
  /** Longest wait for the response headers. */
  headersMs: number
  /** Longest silence while a body streams. */
  bodyMs: number
}

/** Why an upstream could not answer: not connected to, closed without an answer, answered with what is not HTTP, too slow, or cut short mid-response. */
export type UpstreamFailure = 'unreachable' | 'closed' | 'invalid' | 'timeout' | 'broken'

/** An upstream failure after which the upstream is passed over (see Upstreams.markDown). */
export type PassOverFailure = Extract<UpstreamFailure, 'unreachable' | 'closed'>

/** How a forwarded request ended: the status sent, or 499 when the client left first (failures are told to `onFailure`). */
export interface ProxyOutcome {
  status: number
}

/** How long an upstream that refused a connection, or dropped one unanswered, is passed over (nginx's fail_timeout with max_fails 1). */
const DOWN_MS = 10_000

export interface UpstreamBase {
  origin: string
  path: string
  host: string
  downUntil: number
  /** False from a failed health check until one passes (only with a route's healthCheck). */
  healthy: boolean
}

/** A route's active health check: GET `path` on each upstream every `intervalMs`. */
export interface HealthCheck {
  path: string
  intervalMs: number
  timeoutMs: number
}

const urlOf = (base: UpstreamBase) => `${base.origin}${base.path}`

/** What the gateway hears of health checks: an upstream (by its URL) that failed one, or passed again. */
export type HealthListener = (origin: string, healthy: boolean, reason: string) => void

/**
 * One route's upstreams, taken in turn, over a shared keep-alive pool. One that
 * cannot be connected to, or that closes a connection without answering, is
 * passed over for DOWN_MS while another is up.
 */
export class Upstreams {
  private next = 0
  private readonly bases: UpstreamBase[]
  private checking: NodeJS.Timeout | undefined

  /** `onDown` hears of an upstream newly passed over, and why (not of each request that finds it still down). */
  constructor(route: RouteConfig, private readonly onDown: (origin: string, failure: PassOverFailure) => void = () => {}) {
    const urls = Array.isArray(route.upstream) ? route.upstream : [route.upstream]
    this.bases = urls.map((url) => {
      const parsed = new URL(url)
      return { origin: parsed.origin, path: parsed.pathname.replace(/\/$/, ''), host: parsed.host, downUntil: 0, healthy: true }
    })
  }

  /**
   * Starts the route's active health checks: an upstream whose check fails
   * (a status other than 2xx or 3xx, no answer within timeoutMs, no
   * connection) is passed over until one passes. Requests themselves only
   * notice an upstream that refuses connections; a check also finds one that
   * answers 503 or hangs. Until stop().
   */
  startHealthChecks(check: HealthCheck, dispatcher: Dispatcher, onChange: HealthListener): void {
    this.stop()
    const probe = async (base: UpstreamBase): Promise<void> => {
      let reason: string
      try {
        const response = await dispatcher.request({
          origin: base.origin,
          path: `${base.path}${check.path}`,
          method: 'GET',
          headers: { host: base.host, 'user-agent': 'sluice-health-check' },
          headersTimeout: check.timeoutMs,
          bodyTimeout: check.timeoutMs,
        })
        await response.body.dump()
        reason = response.statusCode < 400 ? '' : `status ${response.statusCode}`
      } catch (error) {
        reason = error instanceof errors.HeadersTimeoutError || error instanceof errors.BodyTimeoutError ? `no answer within ${check.timeoutMs} ms` : (error as Error).message
      }
      const healthy = reason === ''
      if (healthy !== base.healthy && this.checking !== undefined) {
        base.healthy = healthy
        onChange(urlOf(base), healthy, reason)
      }
    }
    let running = false
    const round = () => {
      // A round still waiting for a slow upstream is not stacked on.
      if (running) return
      running = true
      void Promise.all(this.bases.map(probe)).finally(() => { running = false })
    }
    this.checking = setInterval(round, check.intervalMs).unref()
    round()
  }

  /**
   * Takes over what `previous` (the same route before a reload, checked on the
   * same path) knew of each upstream both list: one failing its check stays
   * passed over until a check passes, rather than getting requests again
   * because the file changed.
   */
  inheritHealth(previous: Upstreams): void {
    const known = new Map(previous.bases.map((base) => [urlOf(base), base.healthy]))
    for (const base of this.bases) base.healthy = known.get(urlOf(base)) ?? true
  }

  /** Takes over until when `previous` passes over each upstream both list (one refusing connections, or dropping them unanswered). */
  inheritPassedOver(previous: Upstreams): void {
    const known = new Map(previous.bases.map((base) => [urlOf(base), base.downUntil]))
    for (const base of this.bases) base.downUntil = known.get(urlOf(base)) ?? 0
  }

  /** Stops the health checks (a reload replaced the route, or the gateway is closing). */
  stop(): void {
    clearInterval(this.checking)
    this.checking = undefined
  }

  get size(): number {
    return this.bases.length
  }

  /**
   * Each upstream's state now: `passedOverUntil` while it is passed over for
   * refusing or dropping connections, `healthy` where the route has a health check.
   */
  states(checked: boolean): Array<{ url: string; healthy?: boolean; passedOverUntil?: string }> {
    const now = Date.now()
    return this.bases.map((base) => ({
      url: urlOf(base),
      ...(checked ? { healthy: base.healthy } : {}),
      ...(base.downUntil > now ? { passedOverUntil: new Date(base.downUntil).toISOString() } : {}),
    }))
  }

  /** Round-robin over the upstreams not marked down nor failing their health check (over all of them when every one is). */
  pick(): UpstreamBase {
    const count = this.bases.length
    const now = count > 1 ? Date.now() : 0
    for (let offset = 0; offset < count; offset++) {
      const base = this.bases[(this.next + offset) % count] as UpstreamBase
      if (base.downUntil <= now && base.healthy) {
        this.next = (this.next + offset + 1) % count
        return base
      }
    }
    const base = this.bases[this.next] as UpstreamBase
    this.next = (this.next + 1) % count
    return base
  }

  /** Passes `base` over for DOWN_MS, when there is another to take its requests. */
  markDown(base: UpstreamBase, failure: PassOverFailure): void {
    if (this.bases.length === 1) return
    const now = Date.now()
    if (base.downUntil <= now) this.onDown(base.origin, failure)
    base.downUntil = now + DOWN_MS
  }
}

/** The keep-alive pools every route shares (one per upstream origin inside the Agent). */
export function createAgent(keepAliveMs: number): Agent {
  return new Agent({ keepAliveTimeout: keepAliveMs, connections: 256, pipelining: 1 })
}

/** A route's path rewriting, compiled: called with the path as routed, it gives the path the upstream gets. */
export interface PathRewrite {
  (path: string): string
  /** The prefix stripped from `path`, as the client wrote it; undefined when none was (the upstream hears of it in X-Forwarded-Prefix). */
  strippedPrefix(path: string): string | undefined
  /** The path the upstream gets, given what strippedPrefix said of it (for a caller that needs both, without stripping twice). */
  upstreamPath(path: string, strippedPrefix: string | undefined): string
  /**
   * Whether every upstream path maps back to the client's (a stripped prefix at
   * most, no regex `rewrite`), so that the upstream's Location naming itself can
   * be given back as the client's path.
   */
  readonly mapsBack: boolean
}

/**
 * Compiles a route's path rewriting: strip a prefix, then a regex replacement.
 * Both compare as the route's patterns do (`caseSensitive`): a route that
 * takes /API/hello for /api/** strips its /api from it too.
 */
export function pathRewriter(route: Pick<RouteConfig, 'stripPrefix' | 'rewrite'>, caseSensitive = true): PathRewrite {
  const strip = route.stripPrefix === '/' || route.stripPrefix === undefined ? undefined : caseSensitive ? route.stripPrefix : route.stripPrefix.toLowerCase()
  const rewrite = route.rewrite === undefined ? undefined : { pattern: new RegExp(route.rewrite.pattern, caseSensitive ? '' : 'i'), replacement: route.rewrite.replacement }
  const strippedPrefix = (path: string): string | undefined => {
    if (strip === undefined) return undefined
    const head = caseSensitive ? path.slice(0, strip.length + 1) : path.slice(0, strip.length + 1).toLowerCase()
    return head === strip || head === `${strip}/` ? path.slice(0, strip.length) : undefined
  }
  const upstreamPath = (path: string, prefix: string | undefined): string => {
    let result = prefix === undefined ? path : path.slice(prefix.length) || '/'
    if (rewrite !== undefined) result = result.replace(rewrite.pattern, rewrite.replacement)
    return result.startsWith('/') ? result : `/${result}`
  }
  return Object.assign((path: string) => upstreamPath(path, strippedPrefix(path)), { strippedPrefix, upstreamPath, mapsBack: rewrite === undefined })
}

/**
 * The Location an upstream answered with, as the client should follow it: one
 * that names the upstream's own URL (built from the Host the gateway sent it)
 * becomes the client's path to the same place, as nginx's `proxy_redirect
 * default` does, so a redirect neither leaks the upstream's address nor leads
 * the client around the gateway. Any other Location is left as it is.
 */
export function clientLocation(location: string, base: Pick<UpstreamBase, 'origin' | 'path'>, strippedPrefix: string | undefined): string {
  const own = `${base.origin}${base.path}`
  // The scheme and host compare without case; the origin is held in lower case.
  if (location.slice(0, base.origin.length).toLowerCase() !== base.origin || location.slice(base.origin.length, own.length) !== base.path) return location
  const rest = location.slice(own.length)
  if (rest !== '' && !'/?#'.includes(rest[0] as string)) return location
  const path = rest.startsWith('/') ? rest : `/${rest}`
  return strippedPrefix === undefined ? path : `${strippedPrefix}${path}`
}

/** Answers in the upstream's place (a refusal, a problem), with a length rather than a chunked body. */
export function respond(res: ServerResponse, outcome: HttpOutcome): void {
  // HTTP/2 has no Connection field: its framing says what the field would.
  const headers = (res.req?.httpVersionMajor ?? 1) >= 2 ? outcome.headers.filter(([name]) => name.toLowerCase() !== 'connection').flat() : outcome.headers.flat()
  const body = outcome.body ?? ''
  // RFC 9110 8.6: a 204 (a CORS preflight's answer) carries no Content-Length.
  if (!BODILESS.has(outcome.status)) headers.push('Content-Length', String(Buffer.byteLength(body)))
  res.writeHead(outcome.status, headers)
  res.end(body)
}

export interface ForwardOptions {
  /** The request's path as routed (normalized; see http/path.ts), sent on after rewriting. */
  path: string
  dispatcher: Dispatcher
  upstreams: Upstreams
  rewrite: PathRewrite
  preserveHost: boolean
  timeouts: UpstreamTimeouts
  /** `http` or `https`: how the client reached the gateway. */
  protocol: string
  /**
   * The client's address as the gateway keys it (through the trusted proxies),
   * sent as X-Real-IP in place of any the client wrote; undefined: none is sent.
   */
  clientAddress?: string | undefined
  /**
   * The socket's peer is a trusted proxy (`identity.clientIp.trustProxy`): the
   * X-Forwarded-Proto, -Host, -Port and -Prefix it sent are passed on as they came.
   */
  fromTrustedProxy?: boolean
  /** Headers to add to the response (rate-limit fields, and CORS ones under `cors`). */
  extraHeaders: ReadonlyArray<[string, string]>
  /** The gateway answers CORS itself: the upstream's Access-Control-* response fields are not passed on. */
  replacesCors?: boolean
  /**
   * Told of each upstream failure as it happens, before the client is answered,
   * with what undici found: `retried` when the request was sent again (a
   * failure the client never sees).
   */
  onFailure?: (failure: UpstreamFailure, upstream: string, error: Error, retried: boolean) => void
  /** A WebSocket upgrade: asked of the upstream, and when it agrees (101), the two connections are joined. */
  upgrade?: Upgrade
}

export interface Upgrade {
  /** The protocol the client asked for (`websocket`). */
  protocol: string
  /** The client's connection, handed over by node with the request. */
  socket: Socket
  /** Bytes the client sent after the request head, for the upstream. */
  head: Buffer
  /** Told of each tunnel opened, to close it at shutdown. */
  onTunnel: (client: Socket, upstream: Duplex) => void
}

export function forward(req: IncomingMessage, res: ServerResponse, options: ForwardOptions): Promise<ProxyOutcome> {
  const path = options.path
  const query = requestQuery(req.url ?? '/')
  const hasBody = req.httpVersionMajor >= 2
    // An HTTP/2 request has a body unless its HEADERS frame ended the stream; neither field need say so.
    ? !(req as unknown as Http2ServerRequest).stream.endAfterHeaders
    : req.headers['content-length'] !== undefined ? req.headers['content-length'] !== '0' : req.headers['transfer-encoding'] !== undefined
  const replayable = !hasBody && options.upgrade === undefined && IDEMPOTENT.has(req.method ?? '')
  const strippedPrefix = options.rewrite.strippedPrefix(path)
  const upstreamPath = options.rewrite.upstreamPath(path, strippedPrefix)
  // undici's low-level dispatch: the body goes straight into `res` with
  // backpressure, and the controller it hands over aborts the upstream request
  // when the client leaves. (Measured on small responses: request() + pipeline
  // ran at half the requests/s, and an AbortSignal per request cost a fifth.)
  return new Promise<ProxyOutcome>((resolve) => {
    let status = 0
    /** The upstream's status and header fields, until the client is sent them (see onResponseStart). */
    let head: [number, string[]] | undefined
    let headTimer: NodeJS.Timeout | undefined
    const sendHead = () => {
      if (head === undefined) return
      res.writeHead(head[0], head[1])
      head = undefined
      clearTimeout(headTimer)
    }
    let controller: Dispatcher.DispatchController | undefined
    let clientGone = false
    const resume = () => controller?.resume()
    const onClose = () => {
      // (An HTTP/2 response whose stream was reset reads as finished: only HTTP/1.1's says it was all sent.)
      if (res.writableFinished && req.httpVersionMajor < 2) return
      clientGone = true
      controller?.abort(new Error('the client closed the connection'))
    }
    const finish = (outcome: ProxyOutcome) => {
      clearTimeout(headTimer)
      res.off('close', onClose)
      res.off('drain', resume)
      resolve(outcome)
    }
    res.once('close', onClose)
    // A client gone while the request was decided (an HTTP/2 stream reset at once) closed the response before
    // this listener: the upstream request is aborted as it starts, not left writing into a closed stream.
    if (responseClosed(res)) clientGone = true
    // Sent again on a failure (see onResponseError) while `triesLeft` allows.
    const send = (base: UpstreamBase, triesLeft: number): boolean => options.dispatcher.dispatch({
      origin: base.origin,
      path: `${base.path}${upstreamPath}${query}`,
      method: req.method as Dispatcher.HttpMethod,
      headers: requestHeaders(req, options, base.host, strippedPrefix),
      body: hasBody && options.upgrade === undefined ? uploadOf(req) : null,
      upgrade: options.upgrade?.protocol ?? null,
      headersTimeout: options.timeouts.headersMs,
      bodyTimeout: options.timeouts.bodyMs,
    }, {
      onRequestStart(started) {
        controller = started
        if (clientGone) started.abort(new Error('the client closed the connection'))
      },
      onResponseStart(started, statusCode, headers) {
        // undici hands on any number; under 100 is no HTTP status (undici would fail on it anyway, as an internal assertion).
        if (statusCode < 100) return started.abort(new InvalidResponseError(`status ${statusCode}`))
        if (statusCode < 200) return // 1xx interim responses stay on the upstream hop
        status = statusCode
        const location = headers.location
        if (typeof location === 'string' && options.rewrite.mapsBack) {
          const mapped = clientLocation(location, base, strippedPrefix)
          if (mapped !== location) headers = { ...headers, location: mapped }
        }
        head = [statusCode, responseHeaders(headers, options.extraHeaders, NONE, upstreamFieldsDropped(statusCode, options.replacesCors === true))]
        // The head goes out with the body's first bytes or its end, or on its own after HEAD_HOLD_MS (a stream,
        // a long poll: the client learns the status and its fields as the upstream sends them): an answer the
        // upstream breaks off before then (an invalid first chunk) is still answered 502.
        // Head, body and end of a small response usually arrive together: one write to the socket, not three.
        res.cork()
        process.nextTick(() => {
          res.uncork()
          if (head === undefined) return
          headTimer = setTimeout(() => {
            sendHead()
            res.flushHeaders()
          }, HEAD_HOLD_MS)
        })
      },
      onRequestUpgrade(_controller, statusCode, headers, upstream) {
        // 101: from here on the bytes are the upgraded protocol's, and flow untouched both ways.
        const upgrade = options.upgrade as Upgrade
        if (upgrade.socket.destroyed) {
          // The client left while the upstream was agreeing: nothing to join it to.
          upstream.destroy()
          return finish({ status: 499 })
        }
        const head = [`HTTP/1.1 ${statusCode} Switching Protocols`, 'Connection: Upgrade']
        const fields = responseHeaders(headers, options.extraHeaders, KEEP_UPGRADE)
        for (let i = 0; i < fields.length; i += 2) head.push(`${fields[i]}: ${fields[i + 1]}`)
        upgrade.socket.write(`${head.join('\r\n')}\r\n\r\n`)
        if (upgrade.head.length > 0) upstream.write(upgrade.head)
        tunnel(upgrade.socket, upstream)
        upgrade.onTunnel(upgrade.socket, upstream)
        finish({ status: statusCode })
      },
      onResponseData(paused, chunk) {
        sendHead()
        if (!res.write(chunk)) {
          // A closed response never drains: waiting for it would hold the upstream request for good.
          if (responseClosed(res)) {
            clientGone = true
            return paused.abort(new Error('the client closed the connection'))
          }
          paused.pause()
          res.once('drain', resume)
        }
      },
      onResponseEnd() {
        sendHead()
        res.end()
        finish({ status })
      },
      onResponseError(_controller, error) {
        if (clientGone || res.destroyed) return finish({ status: 499 })
        if (status !== 0 && BODILESS.has(status) && error instanceof errors.ResponseContentLengthMismatchError) {
          // undici 7 fails a 204 or 304 whose Content-Length is not 0 (a 304 may give its representation's,
          // RFC 9110 8.6) for the content neither has; it drops the connection, and the response is whole.
          sendHead()
          res.end()
          return finish({ status })
        }
        // A head not sent yet is dropped: the client gets a 502 in its place, and the request is not sent again.
        const headDropped = head !== undefined
        head = undefined
        clearTimeout(headTimer)
        if (status !== 0 && !headDropped) {
          // Headers are out: all that is left is to cut the response short so the client sees it incomplete.
          options.onFailure?.('broken', urlOf(base), error, false)
          res.destroy()
          return finish({ status })
        }
        const closed = isClosedBeforeAnswer(error)
        if (isConnectFailure(error)) {
          options.upstreams.markDown(base, 'unreachable')
          const next = triesLeft > 0 && !hasBody ? options.upstreams.pick() : base
          if (next !== base) {
            options.onFailure?.('unreachable', urlOf(base), error, true)
            return send(next, triesLeft - 1)
          }
        } else if (closed && !headDropped) {
          // The upstream took the request and closed without a word (it crashed, or dropped an idle kept-alive
          // connection as the request arrived). Passed over, as nginx marks it failed; a request that changes
          // nothing if done twice goes to the next upstream, as nginx's proxy_next_upstream does, or on a new
          // connection to the same one when it is the only one.
          options.upstreams.markDown(base, 'closed')
          if (triesLeft > 0 && replayable) {
            options.onFailure?.('closed', urlOf(base), error, true)
            return send(options.upstreams.pick(), triesLeft - 1)
          }
        }
        const failure: UpstreamFailure = isTimeout(error) ? 'timeout' : headDropped ? 'invalid' : closed ? 'closed' : isInvalidResponse(error) ? 'invalid' : 'unreachable'
        options.onFailure?.(failure, urlOf(base), error, false)
        const status504 = failure === 'timeout'
        respond(res, problem(status504 ? 504 : 502, status504 ? 'Gateway Timeout' : 'Bad Gateway', FAILURE_DETAIL[failure], [...options.extraHeaders, ['Connection', 'close']]))
        finish({ status: status504 ? 504 : 502 })
      },
    })
    // Each other upstream once; a route with one upstream still gets one more try for the dropped kept-alive connection.
    send(options.upstreams.pick(), Math.max(options.upstreams.size - 1, 1))
  })
}

/**
 * The request body as undici sends it. undici destroys a body it stops
 * reading, which it does when the upstream answers before the upload is in
 * (a 401 or 413, say); destroying the request itself would reset the client's
 * connection, often before the client has read that answer. So undici gets a
 * stream of its own, and the rest of the upload is read and dropped, as node
 * does for a request body its handler leaves unread.
 */
function uploadOf(req: IncomingMessage): PassThrough {
  const upload = new PassThrough()
  req.pipe(upload)
  upload.once('close', () => {
    if (req.complete) return
    req.unpipe(upload)
    req.resume()
  })
  // A client gone mid-upload: the upstream must not wait for the rest. (An HTTP/2 request counts as complete
  // once its stream is reset; the body is all there only if it reached the upload's end.)
  const http2 = req.httpVersionMajor >= 2
  req.once('close', () => {
    if (http2 ? !upload.writableEnded : !req.complete) upload.destroy(new Error('the client closed the connection'))
  })
  return upload
}

/** A 101's `Upgrade` names the protocol switched to; its `Connection` is written by the tunnel itself. */
const KEEP_UPGRADE: ReadonlySet<string> = new Set(['upgrade'])

/** Statuses that never have content, whatever their Content-Length says. */
const BODILESS: ReadonlySet<number> = new Set([204, 304])
/** RFC 9110 8.6: a 204 has no Content-Length; one an upstream sent anyway is not passed on. */
const NO_CONTENT_DROPS: ReadonlySet<string> = new Set(['content-length'])
/** An upstream's CORS fields, where the gateway answers CORS itself (`cors`): two Access-Control-Allow-Origin fields fail in browsers. */
const CORS_FIELDS: ReadonlySet<string> = new Set([
  'access-control-allow-origin', 'access-control-allow-credentials', 'access-control-expose-headers',
  'access-control-allow-methods', 'access-control-allow-headers', 'access-control-max-age',
])
const CORS_FIELDS_AND_LENGTH: ReadonlySet<string> = new Set([...CORS_FIELDS, ...NO_CONTENT_DROPS])

/** The upstream's response fields not passed on, besides the hop-by-hop ones. */
function upstreamFieldsDropped(statusCode: number, replacesCors: boolean): ReadonlySet<string> {
  if (statusCode === 204) return replacesCors ? CORS_FIELDS_AND_LENGTH : NO_CONTENT_DROPS
  return replacesCors ? CORS_FIELDS : NONE
}

function responseHeaders(upstream: Record<string, string | string[] | undefined>, extra: ReadonlyArray<[string, string]>, keep: ReadonlySet<string> = NONE, drop: ReadonlySet<string> = NONE): string[] {
  const headers: string[] = []
  const dropped = connectionTokens(upstream.connection)
  // An upstream that limits too: one value per one-value field, the tighter side's.
  const merged = extra.length === 0 ? undefined : mergeWithUpstream(upstream, extra)
  for (const name in upstream) {
    const value = upstream[name]
    if (value === undefined || ((HOP_BY_HOP.has(name) || dropped.has(name)) && !keep.has(name)) || drop.has(name) || merged?.drop.has(name) === true) continue
    if (Array.isArray(value)) for (const item of value) headers.push(name, item)
    else headers.push(name, value)
  }
  for (const [name, value] of merged?.ours ?? extra) headers.push(name, value)
  return headers
}

/**
 * Fields that carry one value: two limiters' values joined by a proxy
 * (`X-RateLimit-Remaining: 2, 50`) are read by no client. Each family's
 * remaining count is read as sluice's client reads its dialect.
 */
const ONE_VALUE_FAMILIES: ReadonlyArray<{ remaining: (header: HeaderLookup) => number | undefined; names: readonly string[] }> = [
  { remaining: (header) => draft6(header)?.[0]?.remaining, names: ['ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset'] },
  {
    remaining: (header) => legacy(header, 0)?.[0]?.remaining,
    names: ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'x-ratelimit-replenish-rate', 'x-ratelimit-burst-capacity', 'x-ratelimit-requested-tokens'],
  },
  // draft-7's RateLimit is one dictionary; draft-10's, a list under the same name (which draft7 does not read), combines.
  { remaining: (header) => draft7(header)?.[0]?.remaining, names: ['ratelimit'] },
]
const ONE_VALUE_NAMES = ONE_VALUE_FAMILIES.flatMap(({ names }) => names)
const NO_NAMES: ReadonlySet<string> = new Set()

/**
 * The gateway's fields beside those of an upstream that limits too: list
 * fields (draft-10's `RateLimit`, every `RateLimit-Policy`) carry both sides'
 * items, as RFC 9110 5.3 combines them. Of a one-value family both sides send,
 * the response keeps the side with fewer units remaining, whose limit the
 * client's next request meets first (the gateway's on a tie, or when the
 * upstream's count cannot be read). Returns the upstream field names to drop
 * and the gateway's fields to send.
 */
function mergeWithUpstream(upstream: Readonly<Record<string, string | string[] | undefined>>, ours: ReadonlyArray<[string, string]>): { drop: ReadonlySet<string>; ours: ReadonlyArray<[string, string]> } {
  // Most upstreams send no such field: one loop over ten names.
  let limitsToo = false
  for (let i = 0; i < ONE_VALUE_NAMES.length && !limitsToo; i++) limitsToo = upstream[ONE_VALUE_NAMES[i] as string] !== undefined
  if (!limitsToo) return { drop: NO_NAMES, ours }
  const ourFields = new Map(ours.map(([name, value]) => [name.toLowerCase(), value]))
  const theirField: HeaderLookup = (name) => {
    const value = upstream[name]
    return typeof value === 'string' ? value : undefined
  }
  const drop = new Set<string>()
  let kept = ours
  for (const { names, remaining } of ONE_VALUE_FAMILIES) {
    const ourRemaining = remaining((name) => ourFields.get(name))
    if (ourRemaining === undefined || !names.some((name) => upstream[name] !== undefined)) continue
    const theirRemaining = remaining(theirField)
    if (theirRemaining !== undefined && theirRemaining < ourRemaining) kept = kept.filter(([name]) => !names.includes(name.toLowerCase()))
    else for (const name of names) drop.add(name)
  }
  return { drop, ours: kept }
}

function requestHeaders(req: IncomingMessage, options: ForwardOptions, upstreamHost: string, strippedPrefix: string | undefined): Record<string, string | string[]> {
  // What the client reached the gateway by: a trusted proxy's word for its own hop (a load balancer that
  // ended TLS says https), else the gateway's. An upstream that redirects plain http to https would
  // otherwise send, behind such a proxy, every request round again. From a client, FROM_PROXIES_ONLY
  // are not passed on: its port would override the port of the X-Forwarded-Host the gateway sets
  // (Spring's ForwardedHeaderFilter builds its links with it), its prefix the links' path.
  const fromProxy = options.fromTrustedProxy === true
  const headers: Record<string, string | string[]> = {}
  const dropped = connectionTokens(req.headers.connection)
  for (const [name, value] of Object.entries(req.headers)) {
    // HTTP/2's pseudo-header fields (`:path`, `:authority`) belong to its framing: the request line and Host say them.
    if (value === undefined || HOP_BY_HOP.has(name) || dropped.has(name) || NOT_PASSED_ON.has(name) || name === 'host' || name === 'expect' || name.startsWith(':')) continue
    if (!fromProxy && FROM_PROXIES_ONLY.has(name)) continue
    headers[name] = value
  }
  const clientHost = req.headers.host ?? authorityOf(req)
  const client = req.socket.remoteAddress ?? ''
  const forwardedFor = req.headers['x-forwarded-for']
  headers['x-forwarded-for'] = forwardedFor === undefined || forwardedFor === '' ? client : `${String(forwardedFor)}, ${client}`
  // The same hop in RFC 7239's field, appended as X-Forwarded-For is: passed on as the client wrote it, its last
  // element would be one the client made up, where an upstream that reads Forwarded (Spring's
  // ForwardedHeaderFilter prefers it) looks for what its proxy saw.
  const forwarded = req.headers.forwarded
  const ownElement = forwardedElement(client, options.protocol, clientHost)
  headers.forwarded = forwarded === undefined || forwarded === '' ? ownElement : `${forwarded}, ${ownElement}`
  // Upstreams that read X-Real-IP (Go's chi and echo, nginx's realip module) believe it outright: one a
  // client wrote would name any address it liked, so it is the gateway's, as Traefik and ingress-nginx send it.
  if (options.clientAddress !== undefined) headers['x-real-ip'] = options.clientAddress
  // A trusted proxy's own, copied above, stays; a client's is replaced.
  if (!fromProxy || !headers['x-forwarded-proto']) headers['x-forwarded-proto'] = options.protocol
  if (clientHost !== undefined && (!fromProxy || !headers['x-forwarded-host'])) headers['x-forwarded-host'] = clientHost
  // What Spring Cloud Gateway and Traefik send for a stripped prefix, so the upstream can build its links under it.
  if (strippedPrefix !== undefined) headers['x-forwarded-prefix'] = strippedPrefix
  headers.host = options.preserveHost && clientHost !== undefined ? clientHost : upstreamHost
  return headers
}

/** The gateway's hop as a `Forwarded` element: `for=203.0.113.7;proto=https;host=api.example.com` (RFC 7239 4, 6). */
function forwardedElement(client: string, protocol: string, host: string | undefined): string {
  // An IPv6 address goes in brackets, and so in quotes (its colons are not token characters); an unknown one is `unknown`.
  const node = client === '' ? 'unknown' : client.includes(':') ? `"[${client}]"` : client
  // RFC 7239's token is HTTP's: a value made of its characters goes bare, any other quoted.
  const quoted = (value: string) => (TOKEN.test(value) ? value : `"${value.replace(/["\\]/g, '\\$&')}"`)
  return `for=${node};proto=${protocol}${host === undefined ? '' : `;host=${quoted(host)}`}`
}

/** Whether the response's connection or stream has closed (node's ServerResponse says so; HTTP/2's through its stream). */
function responseClosed(res: ServerResponse): boolean {
  if (res.closed) return !res.writableFinished
  const stream = (res as unknown as { stream?: { closed: boolean; destroyed: boolean } }).stream
  return stream !== undefined && (stream.closed || stream.destroyed)
}

/** How long a tunnel's side is given to close after its other side has closed. */
const TUNNEL_LINGER_MS = 10_000

/**
 * Joins an upgraded client connection to the upstream's. One side closing
 * ends the other once what is on its way has been written (a WebSocket's last
 * close frame must arrive); a failure closes both at once.
 */
function tunnel(client: Socket, upstream: Duplex): void {
  const fail = () => {
    client.destroy()
    upstream.destroy()
  }
  const endAfter = (closed: Duplex, other: Duplex) => closed.once('close', () => {
    other.end()
    setTimeout(() => other.destroy(), TUNNEL_LINGER_MS).unref()
  })
  client.setTimeout(0)
  client.setNoDelay(true)
  client.once('error', fail)
  upstream.once('error', fail)
  endAfter(client, upstream)
  endAfter(upstream, client)
  upstream.pipe(client)
  client.pipe(upstream)
}

const KEEP_ALIVE: ReadonlySet<string> = new Set(['keep-alive'])
const CLOSE: ReadonlySet<string> = new Set(['close'])

/** Header names a `Connection` field lists: hop-by-hop for this message. */
export function connectionTokens(value: string | string[] | undefined): ReadonlySet<string> {
  if (value === undefined) return NONE
  // Nearly every message says one of these: no set built per message for them.
  if (value === 'keep-alive' || value === 'Keep-Alive') return KEEP_ALIVE
  if (value === 'close' || value === 'Close') return CLOSE
  return new Set(String(value).split(',').map((token) => token.trim().toLowerCase()).filter((token) => token !== ''))
}

/** RFC 9110 9.2.2: methods whose effect is the same done once or twice (TRACE aside: nothing to retry it for). */
const IDEMPOTENT: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE'])

/** The upstream's connection closed or was reset after the request went out and before any answer. */
function isClosedBeforeAnswer(error: unknown): boolean {
  if (error instanceof errors.SocketError) return true
  const code = (error as { code?: unknown } | undefined)?.code
  return code === 'ECONNRESET' || code === 'EPIPE'
}

/** The upstream could not be connected to: it never saw the request. */
function isConnectFailure(error: unknown): boolean {
  if (error instanceof errors.ConnectTimeoutError) return true
  const code = (error as { code?: unknown } | undefined)?.code
  return code === 'ECONNREFUSED' || code === 'EHOSTUNREACH' || code === 'ENETUNREACH' || code === 'ENOTFOUND' || code === 'EAI_AGAIN'
}

/**
 * How long an upstream's head waits for its body before it is sent alone. A
 * body broken off within it still gets the client a 502; a stream's head is
 * this late at most.
 */
const HEAD_HOLD_MS = 50

/** What the client's 502 or 504 says happened. */
const FAILURE_DETAIL: Record<Exclude<UpstreamFailure, 'broken'>, string> = {
  unreachable: 'The upstream could not be reached.',
  closed: 'The upstream closed the connection without answering.',
  invalid: 'The upstream answered with a response that is not valid HTTP.',
  timeout: 'The upstream did not answer in time.',
}

/** An upstream answer undici takes but HTTP does not. */
class InvalidResponseError extends Error {}

/** The upstream's answer could not be parsed: malformed, headers past the size limit, a body not the length it said (Content-Length with chunked). */
function isInvalidResponse(error: unknown): boolean {
  return error instanceof errors.HTTPParserError || error instanceof errors.HeadersOverflowError || error instanceof errors.ResponseContentLengthMismatchError || error instanceof InvalidResponseError
}

function isTimeout(error: unknown): boolean {
  return error instanceof errors.HeadersTimeoutError || error instanceof errors.ConnectTimeoutError || error instanceof errors.BodyTimeoutError
}
