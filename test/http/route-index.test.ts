/**
 * The lookup that spares a gateway of many routes a try of each: it must
 * never leave out a route that matches, under any reading of the path, and
 * must keep the routes' order (the first that matches wins).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { candidatesByPath, compileMatch, pathReadings } from '../../src/http/match.ts'
import { createRateLimitPipeline, type HttpOutcome, type RuleOptions } from '../../src/http/handler.ts'
import { pathAsUrlReads, requestPath, requestQuery } from '../../src/http/path.ts'
import type { HttpRequest } from '../../src/http/handler.ts'
import { fcOptions } from '../helpers.ts'

// Segments that fold unusually (Kelvin sign, long s, sharp s), differ only in case, or hold wildcards.
const segment = fc.constantFrom('api', 'API', 'Api', 'login', 'k', 'K', '\u212A', 's', 'S', 'ſ', 'ß', 'SS', 'é', 'É', '', 'v1', '*', '**', 'v*', 'a;b', '%2e')
const pattern = fc.array(segment, { minLength: 1, maxLength: 3 }).map((parts) => `/${parts.join('/')}`)
const route = fc.record({
  path: fc.option(fc.array(pattern, { minLength: 1, maxLength: 2 }), { nil: undefined }),
  method: fc.option(fc.constantFrom('GET', 'POST'), { nil: undefined }),
})
// Targets as clients send them: encoded slashes, backslashes, parameters, dots, a leading `//`.
const targetPart = fc.constantFrom('api', 'API', 'login', 'K', 'k', '\u212A', 'ſ', 'S', 'ß', 'SS', 'É', 'v1', '%2F', '%2f', '\\', ';x', '..', '.', '', 'x', '%41pi', 'a;b', '%2e')
const target = fc.tuple(fc.array(targetPart, { minLength: 1, maxLength: 4 }), fc.boolean()).map(([parts, query]) => `/${parts.join('/')}${query ? '?_method=DELETE' : ''}`)

/** The request as the node adapter builds it from a target. */
function request(targetText: string, method: string): HttpRequest {
  const pathAsUrl = pathAsUrlReads(targetText)
  return {
    method,
    path: requestPath(targetText),
    ...(pathAsUrl === undefined ? {} : { pathAsUrl }),
    host: 'example.test',
    query: requestQuery(targetText) || undefined,
    header: () => undefined,
    remoteAddress: '127.0.0.1',
  }
}

describe('routes looked up by the first segment of their paths', () => {
  it('leave out no route that matches the request under any reading of its path, and keep their order', () => {
    fc.assert(
      fc.property(fc.array(route, { minLength: 1, maxLength: 12 }), fc.array(target, { minLength: 1, maxLength: 8 }), fc.boolean(), (routes, targets, caseSensitive) => {
        const compiled = routes.map((match, index) => ({ index, match: compileMatch(match, `routes[${index}]`, caseSensitive), path: match.path }))
        const candidatesFor = candidatesByPath(compiled, (entry) => entry.path, caseSensitive)
        for (const text of targets) {
          for (const method of ['GET', 'POST']) {
            const req = request(text, method)
            const candidates = candidatesFor(req)
            const positions = candidates.map((entry) => entry.index)
            assert.deepEqual(positions, [...positions].sort((a, b) => a - b), 'in the routes\' order, each once')
            assert.equal(new Set(positions).size, positions.length)
            for (const entry of compiled) {
              const matches = entry.match(req) || pathReadings(req).some((path) => entry.match.at(req, path))
              if (matches) assert.ok(positions.includes(entry.index), `routes[${entry.index}] ${JSON.stringify(entry.path)} matches ${JSON.stringify(text)} (${method}, case-sensitive ${caseSensitive}) but is not a candidate (${JSON.stringify(positions)})`)
            }
          }
        }
      }),
      fcOptions(3000),
    )
  })

  it('skip the routes whose first segment is another, and not the ones that match anywhere', () => {
    const routes = [{ name: 'orders', path: '/orders/**' }, { name: 'any', path: undefined }, { name: 'login', path: ['/login', '/LOGIN/x'] }, { name: 'versioned', path: '/v*/items' }, { name: 'ORDERS', path: '/Orders' }]
    const sensitive = candidatesByPath(routes, (r) => r.path, true)
    const names = (found: readonly { name: string }[]) => found.map((r) => r.name)
    assert.deepEqual(names(sensitive(request('/orders/42', 'GET'))), ['orders', 'any', 'versioned'])
    assert.deepEqual(names(sensitive(request('/Orders', 'GET'))), ['any', 'versioned', 'ORDERS'])
    assert.deepEqual(names(sensitive(request('/elsewhere', 'GET'))), ['any', 'versioned'])
    const insensitive = candidatesByPath(routes, (r) => r.path, false)
    assert.deepEqual(names(insensitive(request('/ORDERS/42', 'GET'))), ['orders', 'any', 'versioned', 'ORDERS'])
    assert.deepEqual(names(insensitive(request('/login', 'GET'))), ['any', 'login', 'versioned'])
    // `/orders/x%2F..%2F..%2Flogin` is `/login` to nginx: the routes of both readings are candidates.
    assert.deepEqual(names(insensitive(request('/orders/x%2F..%2F..%2Flogin', 'GET'))), ['orders', 'any', 'login', 'versioned', 'ORDERS'])
  })

  it('a middleware pipeline decides every request as it would trying each rule in turn', () => {
    fc.assert(
      fc.property(fc.array(route, { minLength: 2, maxLength: 8 }), fc.array(fc.tuple(target, fc.constantFrom('GET', 'POST')), { minLength: 1, maxLength: 20 }), fc.boolean(), (matches, requests, caseSensitive) => {
        const rules: RuleOptions[] = matches.map((match, index) => ({
          name: `r${index}`,
          // Every third rule matched by a function, which the lookup cannot see into.
          match: index % 3 === 2 ? (req: HttpRequest) => req.method === 'POST' : match,
          policies: { algorithm: 'fixed-window', name: `r${index}`, limit: 2, windowMs: 60_000 },
          key: () => 'one-client',
        }))
        const options = { rules, caseSensitive, clock: () => 1_000_000, onWarning: () => {} }
        const everyRule = rules.map((_, index) => index)
        const indexed = createRateLimitPipeline(options)
        const oneByOne = createRateLimitPipeline(options, { rulesFor: () => everyRule })
        const seen = (outcome: HttpOutcome) => `${outcome.status} ${outcome.headers.map(([name, value]) => `${name}: ${value}`).join('; ')}`
        for (const [text, method] of requests) {
          assert.equal(seen(indexed(request(text, method)) as HttpOutcome), seen(oneByOne(request(text, method)) as HttpOutcome), `${method} ${text}`)
        }
      }),
      fcOptions(500),
    )
  })
})
