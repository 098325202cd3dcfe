/**
 * Koa middleware. Koa's `ctx.req` and `ctx.res` are node's request and
 * response, so this is the node adapter in Koa's terms: a refused request is
 * answered by Koa from `ctx.status` and `ctx.body` (middleware before this one
 * sees it, as any other response), an allowed one goes on to `next()` with the
 * fields set. A callback that throws rejects, and Koa's error handling answers
 * (a 500). Path patterns match case-insensitively, as @koa/router routes,
 * unless `caseSensitive: true`, and always against the whole path: mounted
 * under `/api` (koa-mount), a rule for `/api/login` still sees `/api/login`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { createRateLimitPipeline, recordDecision, warningSink, type HttpOutcome, type RateLimitOptions } from '../handler.ts'
import { proxyTrustOnce } from '../client-ip.ts'
import { isPromise } from '../../core/callbacks.ts'
import { boundUnreadBody, nodeRequest, settleWhenSent, waitTurn } from './node.ts'
import type { Decision } from '../../core/types.ts'

/** The parts of Koa's context the middleware uses. */
export interface KoaContextLike {
  req: IncomingMessage
  res: ServerResponse
  /** The target as the client sent it, before mounting rewrote `url`. */
  originalUrl: string
  status: number
  body: unknown
  /** False when the middleware answered the client itself (a client gone while queued). */
  respond?: boolean
  state: { rateLimit?: Decision; [name: string]: unknown }
  set(name: string, value: string): void
  /** Koa's own reading of forwarding headers: `proxy`, and how many of their addresses it keeps. */
  app?: { proxy?: boolean; maxIpsCount?: number }
}

export function rateLimit(options: RateLimitOptions): (ctx: KoaContextLike, next: () => Promise<unknown>) => Promise<void> {
  // @koa/router routes case-insensitively by default: so must the rules, or /API/login escapes /api/login's limit.
  const decide = createRateLimitPipeline({ caseSensitive: false, ...options })
  const checkTrust = proxyTrustOnce(options, 'Koa app', (trust) => (typeof trust === 'number' ? 'app.proxy true, and app.maxIpsCount' : 'app.proxy'), proxyOf, warningSink(options))
  return function sluiceRateLimit(ctx, next) {
    checkTrust(ctx)
    let outcome: HttpOutcome | Promise<HttpOutcome>
    try {
      outcome = decide(nodeRequest(ctx.req, ctx.originalUrl))
    } catch (error) {
      // A callback that throws at once: a rejection all the same, as from the async middleware Koa expects.
      return Promise.reject(error as Error)
    }
    // The memory store decides at once: the request goes on without waiting a microtask for it.
    return isPromise(outcome) ? outcome.then((settled) => apply(ctx, next, settled)) : apply(ctx, next, outcome)
  }
}

/** How the app reads forwarding headers: app.proxy with maxIpsCount n reads the address n entries from the right, sluice's hop count n. */
function proxyOf(ctx: KoaContextLike): unknown {
  return ctx.app?.proxy === true ? (ctx.app.maxIpsCount ?? 0) > 0 ? ctx.app.maxIpsCount : true : undefined
}

async function apply(ctx: KoaContextLike, next: () => Promise<unknown>, outcome: HttpOutcome): Promise<void> {
  // rateLimitOf(ctx.req), as in the node adapter; and Koa's own place for what middleware learns.
  recordDecision(ctx.req, outcome)
  if (outcome.decision !== undefined) ctx.state.rateLimit = outcome.decision
  const handlersDone = settleWhenSent(ctx.res, outcome.settle, outcome.inProgressUntilEnded)
  for (const [name, value] of outcome.headers) ctx.set(name, value)
  if (outcome.proceed) {
    if (outcome.waitMs > 0 && !(await waitTurn(ctx.res, outcome.waitMs))) {
      // The client hung up while queued: nobody to answer, and the handlers never run.
      ctx.respond = false
      handlersDone()
      return
    }
    // Koa 2 leaves the response of a client that has gone unended: the handlers' end is the request's.
    try {
      await next()
    } finally {
      handlersDone()
    }
    return
  }
  boundUnreadBody(ctx.req, ctx.res)
  ctx.status = outcome.status
  // The problem body's Content-Type is among the fields set above: Koa keeps it.
  ctx.body = outcome.body
}

export { rateLimitOf } from '../handler.ts'
export type { RateLimitOptions, RuleOptions, KeyResolver, HttpRequest, HttpOutcome } from '../handler.ts'
