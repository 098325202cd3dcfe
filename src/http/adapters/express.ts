/**
 * Express middleware. Express's request is a node `IncomingMessage`, so this is
 * the node adapter behind Express's `next()`. Client addresses follow sluice's
 * own `clientIp` options, not Express's `trust proxy` setting (an app that
 * trusts a proxy sluice does not is warned of, with the option to give). Path patterns
 * match case-insensitively, as Express routes, unless `caseSensitive: true`,
 * and always against the whole path: mounted under `/api` (a router, or
 * `app.use('/api', ...)`), a rule for `/api/login` still sees `/api/login`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { warningSink, type RateLimitOptions } from '../handler.ts'
import { isPromise } from '../../core/callbacks.ts'
import { nodeLimiter, nodeRequest } from './node.ts'
import { proxyTrustOnce } from '../client-ip.ts'

type Next = (error?: unknown) => void

export function rateLimit(options: RateLimitOptions): (req: IncomingMessage, res: ServerResponse, next: Next) => void {
  // Express routes case-insensitively by default: so must the rules, or /API/login escapes /api/login's limit.
  // Mounting rewrites req.url to the part below the mount point; originalUrl is what the client asked for.
  // The decision is kept aside, not on the request (see decisionsAside in handler.ts).
  const limit = nodeLimiter({ caseSensitive: false, ...options }, (req) => nodeRequest(req, (req as IncomingMessage & { originalUrl?: string }).originalUrl ?? req.url), true)
  const checkTrust = proxyTrustOnce(options, 'Express app', "'trust proxy'", trustProxyOf, warningSink(options))
  return function sluiceRateLimit(req, res, next) {
    checkTrust(req)
    let proceed: boolean | Promise<boolean>
    try {
      proceed = limit(req, res)
    } catch (error) {
      next(error)
      return
    }
    if (isPromise(proceed)) proceed.then((yes) => (yes ? next() : undefined), next)
    else if (proceed) next()
  }
}

/** The app's 'trust proxy' setting, from the request Express hands the middleware. */
function trustProxyOf(req: IncomingMessage): unknown {
  const app = (req as IncomingMessage & { app?: { get?: (name: string) => unknown } }).app
  return typeof app?.get === 'function' ? app.get('trust proxy') : undefined
}

export { rateLimitOf } from '../handler.ts'
export type { RateLimitOptions, RuleOptions, KeyResolver, HttpRequest, HttpOutcome } from '../handler.ts'
