/**
 * node:http adapter. `rateLimitNode(options)` decides a request and, when it is
 * refused, answers it; `withRateLimit(handler, options)` wraps a request
 * listener for `http.createServer` (or node:http2's `createServer` and
 * `createSecureServer`, whose compatibility API it speaks as well).
 * Translation only: the pipeline decides.
 */
import { ServerResponse, type IncomingMessage } from 'node:http'
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2'
import type { Socket } from 'node:net'
import { createRateLimitPipeline, recordDecision, warningSink, type HttpOutcome, type HttpRequest, type RateLimitOptions } from '../handler.ts'
import { isPromise } from '../../core/callbacks.ts'
import { ArgumentError, messageOf } from '../../core/errors.ts'
import { hostAsUrlReads, pathAsUrlReads, requestPath, requestQuery } from '../path.ts'
import { waitUnlessAborted } from '../wait.ts'

/** A request as node:http or node:http2's compatibility API hands it to a listener. */
export type NodeRequest = IncomingMessage | Http2ServerRequest
/** The response that comes with a NodeRequest. */
export type NodeResponse = ServerResponse | Http2ServerResponse

/** `target`: the request target rules see; Express passes `originalUrl`, which its mounting does not rewrite. */
export function nodeRequest(req: NodeRequest, target = req.url ?? '/'): HttpRequest {
  return {
    method: req.method ?? 'GET',
    path: requestPath(target),
    // HTTP/2 names the host in `:authority` and need not send Host; read as Fastify and Hono route it.
    host: req.headers.host ?? authorityOf(req),
    query: requestQuery(target) || undefined,
    header: (name) => {
      const value = req.headers[name]
      return Array.isArray(value) ? value.join(', ') : value
    },
    remoteAddress: req.socket.remoteAddress,
  }
}

/**
 * nodeRequest for a listener sluice cannot see into: its rules also match the
 * path and host WHATWG URL would read from the target (see
 * HttpRequest.pathAsUrl and hostAsUrl).
 */
function listenerRequest(req: NodeRequest): HttpRequest {
  const request = nodeRequest(req)
  const target = req.url ?? '/'
  const pathAsUrl = pathAsUrlReads(target)
  if (pathAsUrl !== undefined && pathAsUrl !== request.path) request.pathAsUrl = pathAsUrl
  // HTTP/2: node lets a Host field through beside an :authority naming another host, and req.authority reads the :authority.
  const authority = authorityOf(req)
  const hostAsUrl = hostAsUrlReads(target, authority ?? request.host) ?? authority
  if (hostAsUrl !== undefined && hostAsUrl !== request.host) request.hostAsUrl = hostAsUrl
  return request
}

export function authorityOf(req: NodeRequest): string | undefined {
  const authority = req.headers[':authority']
  return typeof authority === 'string' ? authority : undefined
}

/**
 * Resolves true when the request may proceed (the rate-limit headers are then
 * set on `res`), false when it was refused and answered.
 */
export function rateLimitNode(
  options: RateLimitOptions,
  toRequest: (req: NodeRequest) => HttpRequest = listenerRequest,
): (req: NodeRequest, res: NodeResponse) => Promise<boolean> {
  const limit = nodeLimiter(options, toRequest)
  return async function rateLimitNodeRequest(req, res) {
    return limit(req, res)
  }
}

/**
 * rateLimitNode for the adapters: the answer itself when the pipeline decided
 * at once (the memory store), so a request goes on in the same tick; else a
 * promise of it. A callback of the options that throws at once throws here.
 */
export function nodeLimiter<Req extends NodeRequest>(
  options: RateLimitOptions,
  toRequest: (req: Req) => HttpRequest = listenerRequest,
  keepDecisionAside = false,
): (req: Req, res: NodeResponse) => boolean | Promise<boolean> {
  const decide = createRateLimitPipeline(options)
  const apply = (req: Req, res: NodeResponse, outcome: HttpOutcome): boolean | Promise<boolean> => {
    recordDecision(req, outcome, keepDecisionAside)
    settleWhenSent(res, outcome.settle, outcome.inProgressUntilEnded)
    for (const [name, value] of outcome.headers) res.setHeader(name, value)
    if (outcome.proceed && outcome.waitMs > 0) return waitTurn(res, outcome.waitMs)
    if (outcome.proceed) return true
    boundUnreadBody(req, res)
    res.statusCode = outcome.status
    // One call for both kinds of response: their end() takes the same arguments.
    ;(res as ServerResponse).end(outcome.body)
    return false
  }
  return function limitNodeRequest(req, res) {
    const outcome = decide(toRequest(req))
    return isPromise(outcome) ? outcome.then((settled) => apply(req, res, settled)) : apply(req, res, outcome)
  }
}

/** How long a request answered without its body being read may go on sending it before its connection is closed. */
const UNREAD_BODY_MS = 2_000

/**
 * Bounds how long a request's body is read once the request has been
 * answered without it (a refusal). To keep an HTTP/1 connection, node reads
 * and throws away whatever body is left, however long it takes: a client
 * over its limit could go on sending (an endless chunked body) for as long
 * as the request timeout allows. A body still coming 2 s after the answer has
 * its connection closed. Not at once: a connection closed while a body is
 * arriving is reset, and a reset can take the answer with it before the
 * client reads it. A body that ends sooner leaves the connection as node
 * keeps it. (HTTP/2 ends the stream, not the connection, by itself.)
 */
export function boundUnreadBody(req: NodeRequest, res: NodeResponse): void {
  if (req.httpVersionMajor >= 2 || req.complete) return
  const request = req as IncomingMessage
  ;(res as ServerResponse).once('finish', () => {
    if (request.complete) return
    const socket = request.socket
    const timer = setTimeout(() => { if (!request.complete) socket.destroy() }, UNREAD_BODY_MS).unref()
    // Removed both ways: a kept connection answers many requests, and must not gather a listener for each.
    const stop = () => {
      clearTimeout(timer)
      request.off('end', stop)
      socket.off('close', stop)
    }
    request.once('end', stop)
    socket.once('close', stop)
  })
}

/**
 * Tells a rule that counts only some responses (`count`) the status sent: 499 for a client gone first.
 * A request a concurrency rule counts (`untilEnded`) is in progress while its handler works: a client
 * that leaves first does not end it, the handler ending the response does. Returns what to call when
 * the framework knows its handlers are done (Koa's `next()`), for a framework that leaves a response
 * unended once its client has gone (Koa 2): the request ends then, if its client left before.
 */
export function settleWhenSent(res: NodeResponse, settle: ((status: number) => void) | undefined, untilEnded = false): () => void {
  if (settle === undefined) return NO_HANDLERS_DONE
  let settled = false
  const settleOnce = (status: number): void => {
    if (settled) return
    settled = true
    settle(status)
  }
  let handlersDone = false
  let leftAtWork = false
  res.once('close', () => {
    if (res.writableFinished) return settleOnce(res.statusCode)
    if (!untilEnded || res.writableEnded || handlersDone) return settleOnce(499)
    // Otherwise a client could start requests and leave at once, to have any number of handlers at work.
    leftAtWork = true
    const response = res as unknown as { end: (...args: unknown[]) => unknown }
    const end = response.end
    response.end = function endAndSettle(this: unknown, ...args: unknown[]) {
      response.end = end
      settleOnce(499)
      return end.apply(this, args)
    }
  })
  return () => {
    handlersDone = true
    if (leftAtWork) settleOnce(499)
  }
}

const NO_HANDLERS_DONE = (): void => {}

/**
 * A response written on a connection node handed over with its request (an
 * `Upgrade` or `CONNECT` request has no ServerResponse): the connection
 * closes once it is sent.
 */
export function responseOnSocket(req: IncomingMessage, socket: Socket): ServerResponse {
  const res = new ServerResponse(req)
  res.shouldKeepAlive = false
  res.assignSocket(socket)
  res.once('finish', () => socket.end())
  return res
}

/**
 * For a server's `'upgrade'` event, which request listeners (and so
 * `withRateLimit` and Express middleware) never see: resolves true when the
 * WebSocket may be accepted (hand the socket on, e.g. to ws's
 * `handleUpgrade`), false when it was refused, answered (429 and its fields)
 * and closed.
 */
export function rateLimitUpgrade(options: RateLimitOptions): (req: IncomingMessage, socket: Socket) => Promise<boolean> {
  const limit = rateLimitNode(options)
  const warn = warningSink(options)
  return async function rateLimitUpgradeRequest(req, socket) {
    // Node leaves an upgraded socket's errors to its owner: a client resetting while it is decided must not crash the process.
    const onError = () => socket.destroy()
    socket.on('error', onError)
    const res = responseOnSocket(req, socket)
    let proceed: boolean
    try {
      proceed = await limit(req, res)
    } catch (error) {
      warn(`an upgrade request could not be decided and was answered 500: ${messageOf(error)}`)
      res.statusCode = 500
      res.end()
      return false
    }
    if (proceed) {
      // Accepted: the socket goes back to its owner as it came, with nothing written on it.
      res.detachSocket(socket)
      socket.off('error', onError)
    }
    return proceed
  }
}

/** A queued request waits its turn; resolves false when the client hangs up first. */
export function waitTurn(res: NodeResponse, waitMs: number): Promise<boolean> {
  return waitUnlessAborted(waitMs, (abort) => {
    const onClose = () => { if (!res.writableEnded) abort() }
    res.once('close', onClose)
    return () => res.off('close', onClose)
  })
}

/**
 * Wraps a request listener: refused requests never reach it. What the listener
 * returns is ignored, as by `http.createServer` (so `(req, res) => res.end()` fits).
 */
export function withRateLimit(
  listener: (req: IncomingMessage, res: ServerResponse) => unknown,
  options: RateLimitOptions,
): (req: IncomingMessage, res: ServerResponse) => void
/** The same for node:http2's compatibility API: `http2.createServer(withRateLimit((req: Http2ServerRequest, res: Http2ServerResponse) => ...))`. */
export function withRateLimit(
  listener: (req: Http2ServerRequest, res: Http2ServerResponse) => unknown,
  options: RateLimitOptions,
): (req: Http2ServerRequest, res: Http2ServerResponse) => void
export function withRateLimit(
  // `never`: each overload pairs a request with its own kind of response, and so is the listener called.
  listener: (req: never, res: never) => unknown,
  options: RateLimitOptions,
): (req: NodeRequest, res: NodeResponse) => void {
  if (typeof listener !== 'function') {
    throw new ArgumentError('listener', listener, 'must be a function (req, res) => ...', 'withRateLimit wraps a listener: createServer(withRateLimit(listener, { rules }))')
  }
  const handle = listener as (req: NodeRequest, res: NodeResponse) => unknown
  const limit = nodeLimiter(options)
  const warn = warningSink(options)
  // A callback of the options threw (key, cost, tiers.of, allow, deny), or a bug did: say which, and answer rather than hang the client.
  const failed = (res: NodeResponse, error: unknown) => {
    warn(`a request could not be decided and was answered 500: ${messageOf(error)}`)
    if (!res.headersSent) res.statusCode = 500
    res.end()
  }
  return function rateLimitedListener(req, res) {
    let proceed: boolean | Promise<boolean>
    try {
      proceed = limit(req, res)
    } catch (error) {
      failed(res, error)
      return
    }
    if (!isPromise(proceed)) {
      if (proceed) handle(req, res)
      return
    }
    proceed.then((yes) => (yes ? handle(req, res) : undefined), (error: unknown) => failed(res, error))
  }
}

export { rateLimitOf } from '../handler.ts'
export type { RateLimitOptions, RuleOptions, KeyResolver, HttpRequest, HttpOutcome } from '../handler.ts'
