/**
 * Express middleware. Express's request is a node `IncomingMessage`, so this is
 * the node adapter behind Express's `next()`. Client addresses follow sluice's
 * own `clientIp` options, not Express's `trust proxy` setting.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { RateLimitOptions } from '../handler.ts'
import { rateLimitNode } from './node.ts'

type Next = (error?: unknown) => void

export function rateLimit(options: RateLimitOptions): (req: IncomingMessage, res: ServerResponse, next: Next) => void {
  const limit = rateLimitNode(options)
  return function sluiceRateLimit(req, res, next) {
    limit(req, res).then((proceed) => (proceed ? next() : undefined), next)
  }
}

export type { RateLimitOptions, RuleOptions, KeyResolver, HttpRequest, HttpOutcome } from '../handler.ts'
