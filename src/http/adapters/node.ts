/**
 * node:http adapter. `rateLimitNode(options)` decides a request and, when it is
 * refused, answers it; `withRateLimit(handler, options)` wraps a request
 * listener for `http.createServer`. Translation only: the pipeline decides.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { createRateLimitHandler, warningSink, type HttpRequest, type RateLimitOptions } from '../handler.ts'
import { requestPath } from '../path.ts'
import { waitUnlessAborted } from '../wait.ts'

/** `target`: the request target rules see; Express passes `originalUrl`, which its mounting does not rewrite. */
export function nodeRequest(req: IncomingMessage, target = req.url ?? '/'): HttpRequest {
  return {
    method: req.method ?? 'GET',
    path: requestPath(target),
    host: req.headers.host,
    header: (name) => {
      const value = req.headers[name]
      return Array.isArray(value) ? value.join(', ') : value
    },
    remoteAddress: req.socket.remoteAddress,
  }
}

/**
 * Resolves true when the request may proceed (the rate-limit headers are then
 * set on `res`), false when it was refused and answered.
 */
export function rateLimitNode(
  options: RateLimitOptions,
  toRequest: (req: IncomingMessage) => HttpRequest = nodeRequest,
): (req: IncomingMessage, res: ServerResponse) => Promise<boolean> {
  const handle = createRateLimitHandler(options)
  return async function rateLimitNodeRequest(req, res) {
    const outcome = await handle(toRequest(req))
    for (const [name, value] of outcome.headers) res.setHeader(name, value)
    if (outcome.proceed && outcome.waitMs > 0) return waitTurn(res, outcome.waitMs)
    if (outcome.proceed) return true
    res.statusCode = outcome.status
    res.end(outcome.body)
    return false
  }
}

/** A queued request waits its turn; resolves false when the client hangs up first. */
export function waitTurn(res: ServerResponse, waitMs: number): Promise<boolean> {
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
): (req: IncomingMessage, res: ServerResponse) => void {
  const limit = rateLimitNode(options)
  const warn = warningSink(options)
  return function rateLimitedListener(req, res) {
    limit(req, res).then(
      (proceed) => (proceed ? listener(req, res) : undefined),
      (error: unknown) => {
        // A callback of the options threw (key, cost, tiers.of, allow, deny), or a bug did: say which, and answer rather than hang the client.
        warn(`a request could not be decided and was answered 500: ${error instanceof Error ? error.message : String(error)}`)
        if (!res.headersSent) res.statusCode = 500
        res.end()
      },
    )
  }
}

export type { RateLimitOptions, RuleOptions, KeyResolver, HttpRequest, HttpOutcome } from '../handler.ts'
