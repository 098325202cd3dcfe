/**
 * CORS at the gateway (the config's `cors`), as Spring Cloud Gateway's
 * globalcors and Kong's cors plugin do it: a browser page on an allowed origin
 * can read every answer, the gateway's own 429 included, and the rate-limit
 * fields on it; preflights are answered here, never forwarded and never
 * charged. Without `cors`, CORS is the upstream's business and nothing here runs.
 */
import type { IncomingMessage } from 'node:http'
import { RATE_LIMIT_FIELDS, type HeaderList } from '../http/headers.ts'
import { problem, type HttpOutcome } from '../http/handler.ts'
import { isHeaderName } from '../http/match.ts'

export interface CorsConfig {
  origins: string[]
  methods: string[]
  headers: string[]
  exposeHeaders: string[]
  credentials: boolean
  maxAgeSeconds: number
}

export interface Cors {
  /** For an answer to a request that sent `origin`: what lets its page read it (nothing for an origin not allowed), and Vary. */
  fieldsFor(origin: string | undefined): HeaderList
  /** A preflight's answer: 204 saying what the request may do, or 403 naming what it may not. */
  preflight(req: IncomingMessage): HttpOutcome
}

/** An OPTIONS request a browser sends before the request it means (Fetch standard, CORS-preflight request). */
export function isPreflight(req: IncomingMessage): boolean {
  return req.method === 'OPTIONS' && req.headers.origin !== undefined && req.headers['access-control-request-method'] !== undefined
}

export function compileCors(config: CorsConfig): Cors {
  const anyOrigin = config.origins.includes('*')
  const origins = new Set(config.origins.map((origin) => origin.toLowerCase()))
  const allowed = (origin: string | undefined): origin is string => origin !== undefined && (anyOrigin || origins.has(origin.toLowerCase()))
  // "*" cannot go with credentials (browsers refuse it, and the config does too); a named origin makes the answer depend on Origin.
  const echo = !anyOrigin || config.credentials
  const vary: HeaderList = echo ? [['Vary', 'Origin']] : []
  // Browsers hide every response field but a few safelisted ones unless exposed: the rate-limit fields (whichever style a
  // route writes or its upstream adds) and Retry-After always are.
  const exposed = [...new Set([...RATE_LIMIT_FIELDS, ...config.exposeHeaders])].join(', ')
  const methods = new Set(config.methods.map((method) => method.toUpperCase()))
  const anyHeader = config.headers.includes('*')
  const headers = new Set(config.headers.map((name) => name.toLowerCase()))
  const allowOrigin = (origin: string): HeaderList => [
    ['Access-Control-Allow-Origin', echo ? origin : '*'],
    ...(config.credentials ? [['Access-Control-Allow-Credentials', 'true'] as [string, string]] : []),
  ]
  const anyFields: HeaderList = [['Access-Control-Allow-Origin', '*'], ['Access-Control-Expose-Headers', exposed]]
  // A preflight's answer also depends on what it asks for.
  const preflightVary: HeaderList = [...vary, ['Vary', 'Access-Control-Request-Method, Access-Control-Request-Headers']]
  const refuse = (detail: string) => problem(403, 'Forbidden', detail, preflightVary)

  return {
    fieldsFor(origin) {
      // Any page, without credentials: the same "*" on every answer, so the answer does not depend on Origin.
      if (!echo) return anyFields
      return allowed(origin) ? [...allowOrigin(origin), ['Access-Control-Expose-Headers', exposed], ...vary] : vary
    },
    preflight(req) {
      const origin = req.headers.origin
      if (!allowed(origin)) return refuse(`The origin ${JSON.stringify(origin)} is not one this API answers browser pages from.`)
      const method = String(req.headers['access-control-request-method']).trim()
      if (!methods.has(method.toUpperCase())) return refuse(`The method ${JSON.stringify(method)} is not allowed from browser pages; allowed: ${config.methods.join(', ')}.`)
      const requested = String(req.headers['access-control-request-headers'] ?? '').split(',').map((name) => name.trim().toLowerCase()).filter((name) => name !== '')
      const refused = requested.find((name) => !isHeaderName(name) || (!anyHeader && !headers.has(name)))
      if (refused !== undefined) return refuse(`The header ${JSON.stringify(refused)} is not allowed from browser pages; allowed: ${config.headers.join(', ') || 'none beyond the CORS-safelisted ones'}.`)
      return {
        proceed: false,
        status: 204,
        headers: [
          ...allowOrigin(origin),
          ['Access-Control-Allow-Methods', config.methods.join(', ')],
          ...(requested.length > 0 ? [['Access-Control-Allow-Headers', anyHeader ? requested.join(', ') : config.headers.join(', ')] as [string, string]] : []),
          ['Access-Control-Max-Age', String(config.maxAgeSeconds)],
          ...preflightVary,
        ],
        body: undefined,
        waitMs: 0,
      }
    },
  }
}
