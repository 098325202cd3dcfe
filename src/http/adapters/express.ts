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

type Next = (error?: unknown) => void

/** Express's names for ranges in its `trust proxy` setting, as CIDRs. */
const EXPRESS_RANGES: Readonly<Record<string, readonly string[]>> = {
  loopback: ['127.0.0.0/8', '::1/128'],
  linklocal: ['169.254.0.0/16', 'fe80::/10'],
  uniquelocal: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', 'fc00::/7'],
}

/**
 * For an app whose `trust proxy` is set while sluice trusts no proxy (the
 * peers' most reported trap, the other way round): what it means, and the
 * clientIp option that says the same. Undefined when the app trusts none.
 */
export function trustProxyAdvice(setting: unknown): string | undefined {
  if (setting === undefined || setting === false || setting === 0) return undefined
  let same: string
  if (typeof setting === 'number') same = `clientIp: { trustProxy: ${setting} }`
  else if (typeof setting === 'string' || Array.isArray(setting)) {
    const entries = (Array.isArray(setting) ? setting : setting.split(',')).map((entry) => String(entry).trim()).filter((entry) => entry !== '')
    same = `clientIp: { trustProxy: ${JSON.stringify(entries.flatMap((entry) => EXPRESS_RANGES[entry] ?? [entry]))} }`
  } else same = "clientIp: { trustProxy } with the proxies' addresses (Express's true trusts every address, so any client could name its own)"
  return `sluice: this Express app trusts a proxy ('trust proxy' is ${typeof setting === 'function' ? 'a function' : JSON.stringify(setting)}), but sluice reads the client address by its own clientIp option, which trusts none: every client behind the proxy shares the proxy's quota. Give sluice the same: ${same}`
}

export function rateLimit(options: RateLimitOptions): (req: IncomingMessage, res: ServerResponse, next: Next) => void {
  // Express routes case-insensitively by default: so must the rules, or /API/login escapes /api/login's limit.
  // Mounting rewrites req.url to the part below the mount point; originalUrl is what the client asked for.
  // The decision is kept aside, not on the request (see decisionsAside in handler.ts).
  const limit = nodeLimiter({ caseSensitive: false, ...options }, (req) => nodeRequest(req, (req as IncomingMessage & { originalUrl?: string }).originalUrl ?? req.url), true)
  // Told at the first request, where the app is known: the options are given before it is.
  let trustChecked = options.clientIp?.trustProxy !== undefined || options.key !== undefined
  return function sluiceRateLimit(req, res, next) {
    if (!trustChecked) {
      trustChecked = true
      const app = (req as IncomingMessage & { app?: { get?: (name: string) => unknown } }).app
      const advice = trustProxyAdvice(typeof app?.get === 'function' ? app.get('trust proxy') : undefined)
      if (advice !== undefined) warningSink(options)(advice)
    }
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

export { rateLimitOf } from '../handler.ts'
export type { RateLimitOptions, RuleOptions, KeyResolver, HttpRequest, HttpOutcome } from '../handler.ts'
