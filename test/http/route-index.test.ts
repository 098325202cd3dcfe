/**
 * The lookup that spares a gateway of many routes a try of each: it must
 * never leave out a route that matches, under any reading of the path, and
 * must keep the routes' order (the first that matches wins).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { candidatesFor, candidatesForInSlices, compileMatch, pathReadings, type MatchOptions } from '../../src/http/match.ts'
import { createRateLimitPipeline, createRateLimitPipelineInSlices, type HttpOutcome, type RuleOptions } from '../../src/http/handler.ts'
import { ArgumentError } from '../../src/core/errors.ts'
import { pathAsUrlReads, requestPath, requestQuery } from '../../src/http/path.ts'
import type { HttpRequest } from '../../src/http/handler.ts'
import { fcOptions, turnsOfEventLoopDuring } from '../helpers.ts'

// Segments that fold unusually (Kelvin sign, long s, sharp s), differ only in case, or hold wildcards.
const segment = fc.constantFrom('api', 'API', 'Api', 'login', 'k', 'K', '\u212A', 's', 'S', 'ſ', 'ß', 'SS', 'é', 'É', '', 'v1', '*', '**', 'v*', 'a;b', '%2e')
const pattern = fc.array(segment, { minLength: 1, maxLength: 3 }).map((parts) => `/${parts.join('/')}`)
const route = fc.record({
  path: fc.option(fc.array(pattern, { minLength: 1, maxLength: 2 }), { nil: undefined }),
  method: fc.option(fc.constantFrom('GET', 'POST'), { nil: undefined }),
  // Hosts as written in a config: any case, a port, a trailing dot, wildcards at several depths, IPv4 and IPv6 literals.
  host: fc.option(fc.array(fc.constantFrom('a.test', 'A.Test', 'a.test:8080', 'a.test.', 'b.test', '*.test', '*.A.test:99', '*.b.a.test', 'x.a.test', 'test', '[::1]', '1.2.3.4', '*.3.4'), { minLength: 1, maxLength: 3 }), { nil: undefined }),
})
// Request hosts: nested below wildcards, empty and leading-dot labels, a bare top label, an empty Host.
const host = fc.option(fc.constantFrom('a.test', 'A.TEST:80', 'a.test.', 'b.test', 'c.test', 'x.a.test', 'X.A.Test.:8080', 'y.x.a.test', 'b.a.test', 'z.b.a.test', '.a.test', 'x..a.test', 'test', '', '[::1]:8080', '1.2.3.4', '9.3.4'), { nil: null })
// Targets as clients send them: encoded slashes, backslashes, parameters, dots, a leading `//`.
const targetPart = fc.constantFrom('api', 'API', 'login', 'K', 'k', '\u212A', 'ſ', 'S', 'ß', 'SS', 'É', 'v1', '%2F', '%2f', '\\', ';x', '..', '.', '', 'x', '%41pi', 'a;b', '%2e')
const target = fc.tuple(fc.array(targetPart, { minLength: 1, maxLength: 4 }), fc.boolean()).map(([parts, query]) => `/${parts.join('/')}${query ? '?_method=DELETE' : ''}`)

/** The request as the node adapter builds it from a target (and an absolute-form target's host, `hostAsUrl`). */
function request(targetText: string, method: string, hostName: string | null = 'example.test', hostAsUrl?: string | null): HttpRequest {
  const pathAsUrl = pathAsUrlReads(targetText)
  return {
    method,
    path: requestPath(targetText),
    ...(pathAsUrl === undefined ? {} : { pathAsUrl }),
    ...(hostAsUrl === undefined || hostAsUrl === null ? {} : { hostAsUrl }),
    host: hostName ?? undefined,
    query: requestQuery(targetText) || undefined,
    header: () => undefined,
    remoteAddress: '127.0.0.1',
  }
}

describe('routes looked up by their hosts and the literal segments of their paths', () => {
  it('leave out no route that matches the request under any reading of its path and host, and keep their order', () => {
    fc.assert(
      fc.property(fc.array(route, { minLength: 1, maxLength: 12 }), fc.array(fc.tuple(target, host, host), { minLength: 1, maxLength: 8 }), fc.boolean(), (routes, targets, caseSensitive) => {
        const compiled = routes.map((match, index) => ({ index, test: compileMatch(match, `routes[${index}]`, caseSensitive), match: match as MatchOptions }))
        const lookUp = candidatesFor(compiled, (entry) => entry.match, caseSensitive)
        for (const [text, hostName, hostAsUrl] of targets) {
          for (const method of ['GET', 'POST']) {
            const req = request(text, method, hostName, hostAsUrl)
            const positions = lookUp(req).map((entry) => entry.index)
            assert.deepEqual(positions, [...new Set(positions)].sort((a, b) => a - b), 'in the routes\' order, each once')
            for (const entry of compiled) {
              const matches = entry.test(req) || pathReadings(req).some((path) => entry.test.at(req, path))
              if (matches) assert.ok(positions.includes(entry.index), `routes[${entry.index}] ${JSON.stringify(entry.match)} matches ${JSON.stringify([text, hostName, hostAsUrl])} (${method}, case-sensitive ${caseSensitive}) but is not a candidate (${JSON.stringify(positions)})`)
            }
          }
        }
      }),
      fcOptions(3000),
    )
  })

  it('skip the routes whose first segment is another, and not the ones that match anywhere', () => {
    const routes: Array<{ name: string; path?: string | string[] }> = [{ name: 'orders', path: '/orders/**' }, { name: 'any' }, { name: 'login', path: ['/login', '/LOGIN/x'] }, { name: 'versioned', path: '/v*/items' }, { name: 'ORDERS', path: '/Orders' }]
    const sensitive = candidatesFor(routes, (r) => r, true)
    const names = (found: readonly { name: string }[]) => found.map((r) => r.name)
    assert.deepEqual(names(sensitive(request('/orders/42', 'GET'))), ['orders', 'any', 'versioned'])
    assert.deepEqual(names(sensitive(request('/Orders', 'GET'))), ['any', 'versioned', 'ORDERS'])
    assert.deepEqual(names(sensitive(request('/elsewhere', 'GET'))), ['any', 'versioned'])
    const insensitive = candidatesFor(routes, (r) => r, false)
    assert.deepEqual(names(insensitive(request('/ORDERS/42', 'GET'))), ['orders', 'any', 'versioned', 'ORDERS'])
    assert.deepEqual(names(insensitive(request('/login', 'GET'))), ['any', 'login', 'versioned'])
    // `/orders/x%2F..%2F..%2Flogin` is `/login` to nginx: the routes of both readings are candidates.
    assert.deepEqual(names(insensitive(request('/orders/x%2F..%2F..%2Flogin', 'GET'))), ['orders', 'any', 'login', 'versioned', 'ORDERS'])
  })

  it('narrow by every literal segment, not the first alone: routes under one /api prefix are told apart', () => {
    const routes: Array<{ name: string; path: string | string[] }> = [
      { name: 'orders', path: '/api/orders/**' }, { name: 'users', path: '/api/users/**' }, { name: 'api', path: '/api/**' }, { name: 'one-user', path: '/api/users/me' }, { name: 'v', path: '/api/v*/items' },
    ]
    const lookUp = candidatesFor(routes, (r) => r, false)
    const names = (found: readonly { name: string }[]) => found.map((r) => r.name)
    assert.deepEqual(names(lookUp(request('/api/users/42', 'GET'))), ['users', 'api', 'v'])
    assert.deepEqual(names(lookUp(request('/API/Users/me/', 'GET'))), ['users', 'api', 'one-user', 'v'])
    assert.deepEqual(names(lookUp(request('/api', 'GET'))), ['api', 'v'])
    assert.deepEqual(names(lookUp(request('/other', 'GET'))), [])
  })

  it('skip the routes of other hosts, and not those of any host', () => {
    const routes: Array<{ name: string; host?: string | string[]; path?: string }> = [
      { name: 'a', host: 'a.test' }, { name: 'b-orders', host: ['b.test', 'B.test:8443'], path: '/orders/**' }, { name: 'wild', host: '*.test' }, { name: 'any' }, { name: 'b', host: 'b.test' },
    ]
    const lookUp = candidatesFor(routes, (r) => r, false)
    const names = (found: readonly { name: string }[]) => found.map((r) => r.name)
    assert.deepEqual(names(lookUp(request('/orders/1', 'GET', 'A.test:8080'))), ['a', 'wild', 'any'])
    assert.deepEqual(names(lookUp(request('/orders/1', 'GET', 'b.test.'))), ['b-orders', 'wild', 'any', 'b'])
    assert.deepEqual(names(lookUp(request('/other', 'GET', 'b.test'))), ['wild', 'any', 'b'])
    // A request without a Host (HTTP/1.0) meets no route that names hosts, wildcards included.
    assert.deepEqual(names(lookUp(request('/x', 'GET', null))), ['any'])
    // An absolute-form target's host is read too: `GET http://a.test/x` with `Host: b.test`.
    assert.deepEqual(names(lookUp(request('/x', 'GET', 'b.test', 'a.test'))), ['a', 'wild', 'any', 'b'])
  })

  it('look wildcard hosts up by their labels from the right: a tenant\'s routes are not tried for another tenant', () => {
    const routes: Array<{ name: string; host?: string | string[] }> = [
      { name: 'acme-any', host: '*.acme.test' }, { name: 'acme', host: 'acme.test' }, { name: 'all', host: '*.test' }, { name: 'globex-any', host: '*.Globex.test:8443' }, { name: 'deep', host: '*.eu.acme.test' }, { name: 'anywhere' },
    ]
    const lookUp = candidatesFor(routes, (r) => r, false)
    const names = (host: string) => lookUp(request('/x', 'GET', host)).map((r) => r.name)
    assert.deepEqual(names('shop.acme.test'), ['acme-any', 'all', 'anywhere'])
    assert.deepEqual(names('a.shop.EU.acme.test.'), ['acme-any', 'all', 'deep', 'anywhere'])
    // `*.acme.test` does not take acme.test itself.
    assert.deepEqual(names('acme.test:80'), ['acme', 'all', 'anywhere'])
    assert.deepEqual(names('x.globex.test'), ['all', 'globex-any', 'anywhere'])
    assert.deepEqual(names('other.test'), ['all', 'anywhere'])
    assert.deepEqual(names('test'), ['anywhere'])
    assert.deepEqual(names('acme.example'), ['anywhere'])
    // An empty label still ends in `.acme.test`, as compileMatch reads it.
    assert.deepEqual(names('.acme.test'), ['acme-any', 'all', 'anywhere'])
  })

  it('a lookup of 2,000 routes built in slices lets the event loop run meanwhile, and finds what one built at once finds', async () => {
    // Routes by path alone, by host (exact and wildcard), and for every request.
    const routes: Array<{ name: string; path?: string; host?: string }> = Array.from({ length: 2_000 }, (_, i) =>
      i % 100 === 99 ? { name: `any${i}` } : i % 3 === 0 ? { name: `host${i}`, host: i % 2 === 0 ? `t${i % 4}.test` : `*.t${i % 4}.test`, path: `/svc${i}/**` } : { name: `path${i}`, path: `/svc${i}/**` })
    const atOnce = candidatesFor(routes, (r) => r)
    const { result: inSlices, turns } = await turnsOfEventLoopDuring(() => candidatesForInSlices(routes, (r) => r))
    assert.ok(turns >= 8, `the loop turned ${turns} times while 2,000 routes were indexed`)
    for (const [path, hostName] of [['/svc1/x', 'a.test'], ['/svc300/x', 't0.test'], ['/svc303/x', 'x.t3.test'], ['/svc1998', 't2.test'], ['/nowhere', 'x.test']] as const) {
      const found = inSlices(request(path, 'GET', hostName)).map((r) => r.name)
      assert.deepEqual(found, atOnce(request(path, 'GET', hostName)).map((r) => r.name))
      assert.ok(found.length < 40, `${path} on ${hostName}: ${found.length} candidates, not every route`)
    }
    assert.deepEqual(inSlices(request('/svc300/x', 'GET', 't0.test')).map((r) => r.name), routes.filter((r) => r.name.startsWith('any') || r.name === 'host300').map((r) => r.name))
  })

  it('many hosts beside many routes for any host: past the bound on merged lists, looked up by path alone, still leaving out no route that matches', () => {
    // 150 hosts, each list holding the 1,000 routes for any host too: 150,000 entries, past the bound.
    const routes: Array<{ name: string; path: string; host?: string }> = [
      ...Array.from({ length: 1_000 }, (_, i) => ({ name: `any${i}`, path: `/svc${i}/**` })),
      ...Array.from({ length: 150 }, (_, i) => ({ name: `tenant${i}`, path: `/svc${i}/**`, host: `t${i}.test` })),
      { name: 'everything', path: '/**' },
    ]
    const lookUp = candidatesFor(routes, (r) => r)
    const compiled = routes.map((route) => ({ name: route.name, test: compileMatch({ path: route.path, ...(route.host === undefined ? {} : { host: route.host }) }, route.name, true) }))
    for (const [path, hostName] of [['/svc7/x', 't7.test'], ['/svc7/x', 't8.test'], ['/svc999', 'x.test'], ['/nowhere', 't1.test']] as const) {
      const req = request(path, 'GET', hostName)
      const found = lookUp(req).map((r) => r.name)
      assert.deepEqual(found, routes.map((r) => r.name).filter((name) => found.includes(name)), 'in the routes\' order')
      for (const entry of compiled) if (entry.test(req)) assert.ok(found.includes(entry.name), `${entry.name} matches ${hostName}${path} but is not a candidate`)
      assert.ok(found.length <= 3, `${path}: ${found.join(', ')}`)
    }
  })

  it('a middleware pipeline decides every request as it would trying each rule in turn', () => {
    fc.assert(
      fc.property(fc.array(route, { minLength: 2, maxLength: 8 }), fc.array(fc.tuple(target, fc.constantFrom('GET', 'POST'), host, host), { minLength: 1, maxLength: 20 }), fc.boolean(), (matches, requests, caseSensitive) => {
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
        for (const [text, method, hostName, hostAsUrl] of requests) {
          const asked = () => request(text, method, hostName, hostAsUrl)
          assert.equal(seen(indexed(asked()) as HttpOutcome), seen(oneByOne(asked()) as HttpOutcome), `${method} ${text} ${hostName} ${hostAsUrl}`)
        }
      }),
      fcOptions(500),
    )
  })

  it('a pipeline of 2,000 rules built in slices lets the event loop run while it is built, and decides as one built at once; a bad late rule is refused the same', async () => {
    const rules: RuleOptions[] = Array.from({ length: 2000 }, (_, index) => ({
      name: `r${index}`,
      match: { path: `/svc${index}/**` },
      policies: { algorithm: 'fixed-window', name: `r${index}`, limit: 1 + (index % 3), windowMs: 60_000 },
      key: () => 'one-client',
    }))
    const options = { rules, clock: () => 1_000_000 }
    const { result: sliced, turns } = await turnsOfEventLoopDuring(() => createRateLimitPipelineInSlices(options))
    // 2,000 rules at 250 a slice: a pause after each of the first seven slices at least.
    assert.ok(turns >= 7, `${turns} turns of the event loop`)
    const whole = createRateLimitPipeline(options)
    const seen = (outcome: HttpOutcome) => `${outcome.status} ${outcome.headers.map(([name, value]) => `${name}: ${value}`).join('; ')}`
    for (const path of ['/svc1999/x', '/svc1999/x', '/svc1999/x', '/svc1999/x', '/svc0/x', '/svc0/x', '/nowhere']) {
      assert.equal(seen(sliced(request(path, 'GET', 'a.test', null)) as HttpOutcome), seen(whole(request(path, 'GET', 'a.test', null)) as HttpOutcome), path)
    }
    assert.equal((sliced(request('/svc1999/x', 'GET', 'a.test', null)) as HttpOutcome).status, 429)

    const late = [...rules.slice(0, 1999), { ...rules[5] as RuleOptions, match: { path: '/late/**' } }]
    assert.throws(() => createRateLimitPipeline({ rules: late }), (error: Error) => error instanceof ArgumentError && /"r5"/.test(error.message))
    await assert.rejects(createRateLimitPipelineInSlices({ rules: late }), (error: Error) => error instanceof ArgumentError && /"r5"/.test(error.message))
  })
})
