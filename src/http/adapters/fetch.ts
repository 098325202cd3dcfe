/**
 * Web-standard adapter (`Request -> Response`), for Hono, Bun, Deno, Workers
 * and anything else built on fetch handlers. The runtime's way of telling the
 * client's address is passed in by the caller (Hono: `getConnInfo(c)`).
 */
import { createRateLimitHandler, recordDecision, type HttpRequest, type RateLimitOptions } from '../handler.ts'
import { ArgumentError } from '../../core/errors.ts'
import { isPromise } from '../../core/callbacks.ts'
import { readThrough } from '../../core/streams.ts'
import { normalizePath } from '../path.ts'
import { waitUnlessAborted } from '../wait.ts'

export function fetchRequest(request: Request, remoteAddress: string | null | undefined): HttpRequest {
  if (remoteAddress !== undefined && remoteAddress !== null && typeof remoteAddress !== 'string') {
    // What a remoteAddress function of the caller's gave: a runtime's info object, say, rather than its address.
    const address = (remoteAddress as { address?: unknown }).address
    const hint = isPromise(remoteAddress) ? 'it must be known when the request is, not later'
      : typeof address === 'string' ? 'this is an address object (Bun\'s requestIP gives one): pass its address, server.requestIP(request)?.address'
        : undefined
    throw new ArgumentError('remoteAddress', remoteAddress, "must be the client's address, a string (or undefined when unknown)", hint)
  }
  const url = new URL(request.url)
  const host = request.headers.get('host') ?? url.host
  return {
    method: request.method,
    // WHATWG URLs resolve dot segments already; empty segments remain.
    path: normalizePath(url.pathname),
    host,
    // A runtime may build the URL from an absolute-form target, whose authority then differs from Host: the app routes by the URL.
    ...(url.host !== host ? { hostAsUrl: url.host } : {}),
    query: url.search === '' ? undefined : url.search,
    header: (name) => request.headers.get(name) ?? undefined,
    remoteAddress: remoteAddress ?? undefined,
  }
}

export interface FetchRateLimiter {
  /**
   * A refusal (429 / 403 response), or undefined with the headers to add to
   * the handler's response, and `settle(status)` to call with its status once
   * its body is sent (or its client has left) when a rule counts only some
   * responses or requests in progress (`count`).
   */
  check(request: Request, remoteAddress?: string | null): Promise<{ response: Response | undefined; headers: Headers; settle?: (status: number) => void }>
}

export function rateLimitFetch(options: RateLimitOptions): FetchRateLimiter {
  const handle = createRateLimitHandler(options)
  return {
    async check(request, remoteAddress) {
      const outcome = await handle(fetchRequest(request, remoteAddress))
      recordDecision(request, outcome)
      const headers = new Headers(outcome.headers)
      if (outcome.proceed && outcome.waitMs > 0) {
        // Queued: proceed after the wait, unless the client aborts first (a 499-style empty answer).
        const waited = await waitUnlessAborted(outcome.waitMs, (abort) => {
          request.signal.addEventListener('abort', abort, { once: true })
          return () => request.signal.removeEventListener('abort', abort)
        })
        if (!waited) {
          outcome.settle?.(499)
          return { response: new Response(null, { status: 499, headers }), headers }
        }
      }
      if (outcome.proceed) return { response: undefined, headers, ...(outcome.settle !== undefined ? { settle: outcome.settle } : {}) }
      return { response: new Response(outcome.body, { status: outcome.status, headers }), headers }
    },
  }
}

/**
 * Wraps a fetch handler: refused requests get their 429, allowed ones reach the
 * handler and its response gets the rate-limit headers.
 */
export function withRateLimit<Rest extends unknown[]>(
  handler: (request: Request, ...rest: Rest) => Response | Promise<Response>,
  options: RateLimitOptions,
  remoteAddress: (request: Request, ...rest: Rest) => string | null | undefined = () => undefined,
): (request: Request, ...rest: Rest) => Promise<Response> {
  if (typeof handler !== 'function') {
    throw new ArgumentError('handler', handler, 'must be a function (request) => Response', 'withRateLimit wraps a handler: withRateLimit(handler, { rules }, remoteAddress)')
  }
  if (typeof remoteAddress !== 'function') throw new ArgumentError('remoteAddress', remoteAddress, 'must be a function (request, ...rest) => string | undefined')
  const limiter = rateLimitFetch(options)
  return async function rateLimitedFetch(request, ...rest) {
    const { response, headers, settle } = await limiter.check(request, remoteAddress(request, ...rest))
    if (response !== undefined) return response
    let upstream: Response
    try {
      upstream = await handler(request, ...rest)
    } catch (error) {
      settle?.(500)
      throw error
    }
    // No headers for a network error (status 0) or a protocol switch (101): Response cannot be rebuilt with
    // those statuses, and a WebSocket upgrade (Deno) must stay the very object the runtime handed out.
    if (upstream.status < 200) {
      settle?.(upstream.status)
      return upstream
    }
    if (settle !== undefined) {
      // Settled once the body is sent: a request streaming its response (server-sent events) is in progress until then.
      const status = upstream.status
      if (upstream.body === null) settle(status)
      return rebuilt(upstream, headers, upstream.body === null ? null : readThrough(upstream.body, (whole) => settle(whole ? status : 499)))
    }
    try {
      headers.forEach((value, name) => upstream.headers.set(name, value))
      return upstream
    } catch {
      // Immutable headers (fetch() results, Response.redirect): copied into a new response.
      return rebuilt(upstream, headers, upstream.body)
    }
  }
}

/** `upstream` as a new response with `body`, its header fields and the rate-limit ones. */
function rebuilt(upstream: Response, headers: Headers, body: ReadableStream<Uint8Array> | null): Response {
  const merged = new Headers(upstream.headers)
  headers.forEach((value, name) => merged.set(name, value))
  return new Response(body, { status: upstream.status, statusText: upstream.statusText, headers: merged })
}

export { rateLimitOf } from '../handler.ts'
export type { RateLimitOptions, RuleOptions, KeyResolver, HttpRequest, HttpOutcome } from '../handler.ts'
