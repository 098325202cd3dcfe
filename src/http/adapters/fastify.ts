/**
 * Fastify plugin: an `onRequest` hook runs the pipeline; refused requests are
 * answered there, allowed ones get the headers on their reply. Warnings go to
 * Fastify's logger unless `onWarning` is given. Paths are matched as the
 * instance routes them: case-insensitively under its `caseSensitive: false`
 * (unless `caseSensitive` is given here), and ending at a `;` under its
 * `useSemicolonDelimiter`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { createRateLimitPipeline, recordDecision, warningSink, type HttpOutcome, type HttpRequest, type RateLimitOptions } from '../handler.ts'
import { isPromise } from '../../core/callbacks.ts'
import { boundUnreadBody, settleWhenSent } from './node.ts'
import { asError } from '../../core/errors.ts'
import { requestPath, requestQuery } from '../path.ts'
import { proxyTrustOnce, UNREADABLE } from '../client-ip.ts'
import { waitUnlessAborted } from '../wait.ts'

/** The parts of Fastify's request and reply the plugin uses. */
interface FastifyRequestLike {
  method: string
  url: string
  hostname?: string
  headers: Record<string, string | string[] | undefined>
  raw: IncomingMessage
}
interface FastifyReplyLike {
  raw: ServerResponse
  header(name: string, value: string): unknown
  code(status: number): FastifyReplyLike
  send(body: unknown): unknown
}
interface RouterOptions {
  caseSensitive?: boolean
  useSemicolonDelimiter?: boolean
}
interface FastifyInstanceLike {
  addHook(name: 'onRequest', hook: (request: FastifyRequestLike, reply: FastifyReplyLike, done: (error?: Error) => void) => void): unknown
  log: { warn(message: string): void }
  /** Fastify 5 takes router options in `routerOptions`, and still reads them at the top level. */
  initialConfig?: RouterOptions & { routerOptions?: RouterOptions }
}

/** A router option as the instance's router applies it. */
function routerOption(fastify: FastifyInstanceLike, name: keyof RouterOptions): boolean | undefined {
  const config = fastify.initialConfig
  return config?.routerOptions?.[name] ?? config?.[name]
}

/** `semicolonEndsPath`: the router's `useSemicolonDelimiter`, under which `/login;x/../y` is routed as `/login`. */
export function fastifyRequest(request: FastifyRequestLike, semicolonEndsPath = false): HttpRequest {
  // Fastify's `headers` is a getter: read it once, not once per header the pipeline asks for.
  const headers = request.headers
  const semicolon = semicolonEndsPath ? request.url.indexOf(';') : -1
  return {
    method: request.method,
    path: requestPath(semicolon === -1 ? request.url : request.url.slice(0, semicolon)),
    host: typeof headers.host === 'string' ? headers.host : request.hostname,
    query: requestQuery(request.url) || undefined,
    header: (name) => {
      const value = headers[name]
      return Array.isArray(value) ? value.join(', ') : value
    },
    remoteAddress: request.raw.socket.remoteAddress,
  }
}

/**
 * Fastify keys reply headers by their lower-case name: handing it that name,
 * the same string each time, spares it a new string to lower-case and look up
 * per header per request. The names are the pipeline's few constants.
 */
const lowerCaseNames = new Map<string, string>()
function lowerCase(name: string): string {
  let lower = lowerCaseNames.get(name)
  if (lower === undefined) {
    lower = name.toLowerCase()
    if (lowerCaseNames.size < 64) lowerCaseNames.set(name, lower)
  }
  return lower
}

/** `fastify.register(sluiceFastify, options)`: applies to every route of the instance, not only its children. */
export const sluiceFastify = Object.assign(
  async function sluiceFastify(fastify: FastifyInstanceLike, options: RateLimitOptions): Promise<void> {
    // Paths are matched as the instance's router reads them: a limit on /login must meet /LOGIN where it routes there.
    const caseSensitive = routerOption(fastify, 'caseSensitive') ?? true
    const semicolonEndsPath = routerOption(fastify, 'useSemicolonDelimiter') ?? false
    const decide = createRateLimitPipeline({ onWarning: (message) => fastify.log.warn(message), caseSensitive, ...options })
    // Fastify keeps trustProxy out of initialConfig; a request of an instance given one has its ips.
    const warn = warningSink({ onWarning: options.onWarning ?? ((message: string) => fastify.log.warn(message)) })
    const checkTrust = proxyTrustOnce(options, 'Fastify instance', 'trustProxy', (request: FastifyRequestLike) => ('ips' in request ? UNREADABLE : undefined), warn)
    const apply = (request: FastifyRequestLike, reply: FastifyReplyLike, outcome: HttpOutcome, done: (error?: Error) => void): void => {
      recordDecision(request, outcome)
      settleWhenSent(reply.raw, outcome.settle, outcome.inProgressUntilEnded)
      for (const [name, value] of outcome.headers) reply.header(lowerCase(name), value)
      if (!outcome.proceed) {
        boundUnreadBody(request.raw, reply.raw)
        reply.code(outcome.status).send(outcome.body)
      } else if (outcome.waitMs > 0) {
        // Queued: proceed after the wait, unless the client hangs up first.
        const socket = request.raw.socket as unknown as { once(e: 'close', f: () => void): void; off(e: 'close', f: () => void): void }
        waitUnlessAborted(outcome.waitMs, (abort) => {
          socket.once('close', abort)
          return () => socket.off('close', abort)
        }).then((waited) => (waited ? done() : reply.code(499).send(undefined)), (error: unknown) => done(asError(error)))
      } else {
        done()
      }
    }
    // A callback hook, not an async one: a decision made at once (the memory store) goes on
    // in the same tick, with no promise to settle per request.
    fastify.addHook('onRequest', (request, reply, done) => {
      checkTrust(request)
      const outcome = decide(fastifyRequest(request, semicolonEndsPath))
      if (isPromise(outcome)) outcome.then((settled) => apply(request, reply, settled, done)).catch((error: unknown) => done(asError(error)))
      else apply(request, reply, outcome, done)
    })
  },
  // What fastify-plugin sets: the hook covers the routes of the instance that registers it.
  { [Symbol.for('skip-override')]: true },
)

export { rateLimitOf } from '../handler.ts'
export type { RateLimitOptions, RuleOptions, KeyResolver, HttpRequest, HttpOutcome } from '../handler.ts'
