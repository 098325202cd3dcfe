import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, it } from 'node:test'
import { createPrivateKey, generateKeyPairSync, type KeyObject } from 'node:crypto'
import { exportJWK, exportPKCS8, exportSPKI, generateKeyPair, SignJWT } from 'jose'
import { apiKey, clientIpKey, firstOf, jwtClaim, jwtVerifier, type HttpRequest } from '../../src/index.ts'

const request = (headers: Record<string, string>, remoteAddress = '198.51.100.7'): HttpRequest => ({
  method: 'GET', path: '/', host: 'api.test', header: (name) => headers[name], remoteAddress,
})
const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
const secret = 'a-shared-secret-of-enough-length!!'
const hs256 = (claims: Record<string, unknown>, expiresIn = '5m', key = secret) =>
  new SignJWT(claims).setProtectedHeader({ alg: 'HS256' }).setIssuedAt().setExpirationTime(expiresIn).sign(new TextEncoder().encode(key))

describe('identity', () => {
  const identity = firstOf(jwtClaim({ secret, algorithms: ['HS256'] }), apiKey(), clientIpKey())

  it('a verified JWT claim is the key; a forged, expired or unsigned one falls through', async () => {
    assert.equal(await identity(request(bearer(await hs256({ sub: '42' })))), 'user:42')
    assert.equal(await identity(request(bearer(await hs256({ sub: '42' }, '5m', 'another-secret-of-enough-length!!')))), 'ip:198.51.100.7', 'forged')
    assert.equal(await identity(request(bearer(await hs256({ sub: '42' }, '-1m')))), 'ip:198.51.100.7', 'expired')
    const unsigned = `${Buffer.from('{"alg":"none","typ":"JWT"}').toString('base64url')}.${Buffer.from('{"sub":"42"}').toString('base64url')}.`
    assert.equal(await identity(request(bearer(unsigned))), 'ip:198.51.100.7', 'alg: none')
    assert.equal(await identity(request(bearer('not.a.jwt'))), 'ip:198.51.100.7')
    assert.equal(await identity(request({ ...bearer('x'.repeat(20_000)) })), 'ip:198.51.100.7', 'oversized token')
    assert.equal(await identity(request(bearer(await hs256({ name: 'no sub' })))), 'ip:198.51.100.7', 'no claim')
  })

  it('an API key header, then the client IP', async () => {
    assert.equal(await identity(request({ 'x-api-key': 'k-123' })), 'apikey:k-123')
    assert.equal(await identity(request({ 'x-api-key': 'k'.repeat(300) })), 'ip:198.51.100.7')
    assert.equal(await identity(request({}, '::ffff:203.0.113.5')), 'ip:203.0.113.5')
  })

  it('a trusted proxy written as a dual-stack socket shows it (::ffff:10.0.0.5) is the IPv4 proxy it names', async () => {
    const viaProxy = request({ 'x-forwarded-for': '203.0.113.9' }, '::ffff:10.0.0.5')
    for (const trustProxy of [['10.0.0.5'], ['::ffff:10.0.0.5'], ['::ffff:10.0.0.0/104'], ['::ffff:0:0/96']]) {
      assert.equal(await clientIpKey({ trustProxy })(viaProxy), 'ip:203.0.113.9', JSON.stringify(trustProxy))
    }
    // Another address, mapped or not, is still no proxy of ours.
    assert.equal(await clientIpKey({ trustProxy: ['::ffff:10.0.0.0/120'] })(request({ 'x-forwarded-for': '203.0.113.9' }, '10.0.1.5')), 'ip:10.0.1.5')
  })

  it('a forwarding header of thousands of entries a client wrote is read only as far as the walk from the right goes', async () => {
    // Behind one proxy, the client's own entries come first; the proxy appends the address it saw.
    const junk = 'x, '.repeat(5_000)
    const cases: Array<[Parameters<typeof clientIpKey>[0], Record<string, string>, string]> = [
      [{ trustProxy: 1 }, { 'x-forwarded-for': `${junk}203.0.113.9` }, 'ip:203.0.113.9'],
      [{ trustProxy: 2 }, { 'x-forwarded-for': `${junk}203.0.113.9, 10.0.0.2` }, 'ip:203.0.113.9'],
      [{ trustProxy: ['10.0.0.0/8'] }, { 'x-forwarded-for': `${junk}203.0.113.9, 10.0.0.2` }, 'ip:203.0.113.9'],
      [{ trustProxy: ['10.0.0.0/8'], header: 'forwarded' }, { forwarded: `${'for=x;by=y, '.repeat(1_500)}for=203.0.113.9` }, 'ip:203.0.113.9'],
      // Unreadable where the walk lands: the last address vouched for.
      [{ trustProxy: 1 }, { 'x-forwarded-for': `203.0.113.9, ${junk}x` }, 'ip:10.0.0.5'],
      [{ trustProxy: 9_000 }, { 'x-forwarded-for': `203.0.113.9, ${junk}x` }, 'ip:203.0.113.9'],
    ]
    const started = performance.now()
    for (let round = 0; round < 20; round++) {
      for (const [options, headers, key] of cases) assert.equal(await clientIpKey(options)(request(headers, '10.0.0.5')), key, JSON.stringify(options))
    }
    // Reading every entry took up to 0.5 s a request (the parser throws on each one that is not an address), 40 s for
    // these 120: a client could keep a core busy with a request a second. A bound far from both, not a benchmark.
    assert.ok(performance.now() - started < 3_000, `120 resolutions took ${Math.round(performance.now() - started)} ms`)
  })

  it('with keys listed, a made-up API key is no identity and falls through to the client IP', async () => {
    for (const keys of [['k-123', 'k-456'], new Set(['k-123', 'k-456']), (key: string) => key.startsWith('k-1')]) {
      const listed = firstOf(apiKey('x-api-key', { keys }), clientIpKey())
      assert.equal(await listed(request({ 'x-api-key': 'k-123' })), 'apikey:k-123')
      assert.equal(await listed(request({ 'x-api-key': ' k-123 ' })), 'apikey:k-123')
      assert.equal(await listed(request({ 'x-api-key': 'made-up' })), 'ip:198.51.100.7')
    }
    assert.throws(() => apiKey('x-api-key', { keys: 'k-123' as never }), /keys must be a list \(or Set\) of key strings/)
    assert.throws(() => apiKey('x-api-key', { keys: ['k-1', ''] }), /keys must be a list/)
    assert.throws(() => apiKey('x-api-key', { keys: [' k-1'] }), /without surrounding spaces/)
    assert.throws(() => apiKey('x-api-key', { keys: [] }), /keys lists no key/)
    // Options given as a list: its keys() would pass for the list of keys, and every request would fail.
    assert.throws(() => apiKey('x-api-key', [] as never), /options must be an object like \{ prefix, maxLength, keys \} \(got an array of 0\)/)
  })

  it('RS256 with a PEM public key, and ES256 through a JWKS endpoint on a real server', async () => {
    const rsa = await generateKeyPair('RS256')
    const rs = jwtClaim({ publicKey: await exportSPKI(rsa.publicKey), algorithms: ['RS256'], claim: 'tenant', prefix: 'tenant' })
    const token = await new SignJWT({ tenant: 'acme' }).setProtectedHeader({ alg: 'RS256' }).setExpirationTime('5m').sign(rsa.privateKey)
    assert.equal(await rs(request(bearer(token))), 'tenant:acme')
    const other = await generateKeyPair('RS256')
    const forged = await new SignJWT({ tenant: 'acme' }).setProtectedHeader({ alg: 'RS256' }).setExpirationTime('5m').sign(other.privateKey)
    assert.equal(await rs(request(bearer(forged))), undefined)

    const ec = await generateKeyPair('ES256')
    const jwk = { ...(await exportJWK(ec.publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' }
    const server = createServer((_req, res) => { res.setHeader('Content-Type', 'application/json'); res.end(JSON.stringify({ keys: [jwk] })) })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/.well-known/jwks.json`
      const es = jwtClaim({ jwksUrl: url, algorithms: ['ES256'], issuer: 'https://issuer.test' })
      const good = await new SignJWT({ sub: 'u-1' }).setProtectedHeader({ alg: 'ES256', kid: 'k1' }).setIssuer('https://issuer.test').setExpirationTime('5m').sign(ec.privateKey)
      assert.equal(await es(request(bearer(good))), 'user:u-1')
      const wrongIssuer = await new SignJWT({ sub: 'u-1' }).setProtectedHeader({ alg: 'ES256', kid: 'k1' }).setIssuer('https://evil.test').setExpirationTime('5m').sign(ec.privateKey)
      assert.equal(await es(request(bearer(wrongIssuer))), undefined)
    } finally {
      server.closeAllConnections()
      server.close()
    }
  })

  /** A real JWKS endpoint for one ES256 key, whose behaviour a test switches: serve the keys, hang, or reset. */
  async function jwksEndpoint() {
    const ec = await generateKeyPair('ES256')
    const jwk = { ...(await exportJWK(ec.publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' }
    const endpoint = { mode: 'serve' as 'serve' | 'hang' | 'reset', fetches: 0, url: '', close: () => {}, token: (sub: string) => new SignJWT({ sub }).setProtectedHeader({ alg: 'ES256', kid: 'k1' }).setExpirationTime('2h').sign(ec.privateKey) }
    const server = createServer((_req, res) => {
      endpoint.fetches++
      if (endpoint.mode === 'hang') return // jose would wait out its 5 s fetch timeout, then fail the token
      if (endpoint.mode === 'reset') return void res.destroy()
      res.setHeader('Content-Type', 'application/json')
      res.end(JSON.stringify({ keys: [jwk] }))
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    endpoint.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`
    endpoint.close = () => { server.closeAllConnections(); server.close() }
    return endpoint
  }

  it('a JWKS endpoint that goes down: the keys already fetched keep verifying, and no request waits on it', async (t) => {
    const endpoint = await jwksEndpoint()
    try {
      t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
      const resolver = jwtClaim({ jwksUrl: endpoint.url, algorithms: ['ES256'] })
      const good = await endpoint.token('u-1')
      assert.equal(await resolver(request(bearer(good))), 'user:u-1')
      assert.equal(endpoint.fetches, 1)
      // Past jose's cache age (10 min), with the endpoint hung: the last keys still verify, the refresh runs behind.
      endpoint.mode = 'hang'
      t.mock.timers.tick(11 * 60_000)
      assert.equal(await resolver(request(bearer(good))), 'user:u-1')
      assert.equal(await resolver(request(bearer(good))), 'user:u-1')
      for (let i = 0; i < 200 && endpoint.fetches < 2; i++) await new Promise((resolve) => setTimeout(resolve, 10))
      assert.equal(await resolver(request(bearer(good))), 'user:u-1')
      assert.equal(endpoint.fetches, 2, 'one refresh in flight, not one per request')
      // A key it never had is still no identity.
      const other = await generateKeyPair('ES256')
      const unknown = await new SignJWT({ sub: 'u-2' }).setProtectedHeader({ alg: 'ES256', kid: 'k2' }).setExpirationTime('2h').sign(other.privateKey)
      assert.equal(await resolver(request(bearer(unknown))), undefined)
    } finally {
      endpoint.close()
    }
  })

  it('says when the JWKS endpoint fails and when it answers again, once each, not at every retry', async (t) => {
    const endpoint = await jwksEndpoint()
    const warnings: string[] = []
    const settled = async (done: () => boolean) => {
      for (let i = 0; i < 200 && !done(); i++) await new Promise((resolve) => setTimeout(resolve, 10))
    }
    try {
      t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
      const resolver = jwtClaim({ jwksUrl: endpoint.url, algorithms: ['ES256'], onWarning: (message) => warnings.push(message) })
      assert.equal(await resolver(request(bearer(await endpoint.token('u-1')))), 'user:u-1')
      // Past jose's cache age, the endpoint resetting: the refresh behind the request fails.
      endpoint.mode = 'reset'
      t.mock.timers.tick(11 * 60_000)
      assert.equal(await resolver(request(bearer(await endpoint.token('u-2')))), 'user:u-2')
      await settled(() => warnings.length > 0)
      assert.equal(endpoint.fetches, 2)
      assert.equal(warnings.length, 1)
      assert.match(warnings[0] ?? '', new RegExp(`^sluice: the JWKS endpoint ${endpoint.url.replace(/[.]/g, '\\.')} failed: .+\\. Bearer tokens go on verifying with the keys it gave 11 min ago; tried again every 30 s$`))
      // Still down at the next try: nothing more is said.
      t.mock.timers.tick(31_000)
      assert.equal(await resolver(request(bearer(await endpoint.token('u-3')))), 'user:u-3')
      await settled(() => endpoint.fetches > 2)
      await new Promise((resolve) => setTimeout(resolve, 50))
      assert.deepEqual([endpoint.fetches, warnings.length], [3, 1])
      endpoint.mode = 'serve'
      t.mock.timers.tick(31_000)
      assert.equal(await resolver(request(bearer(await endpoint.token('u-4')))), 'user:u-4')
      await settled(() => warnings.length > 1)
      assert.deepEqual(warnings.slice(1), [`sluice: the JWKS endpoint ${endpoint.url} answers again; bearer tokens verify with the keys it gave now`])
    } finally {
      endpoint.close()
    }
  })

  it('a JWKS endpoint down at start: tokens are no identity, and it is tried again after 30 s, not on every request', async (t) => {
    const endpoint = await jwksEndpoint()
    try {
      endpoint.mode = 'reset'
      t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
      const warnings: string[] = []
      const resolver = jwtClaim({ jwksUrl: endpoint.url, algorithms: ['ES256'], onWarning: (message) => warnings.push(message) })
      const good = await endpoint.token('u-1')
      assert.deepEqual([await resolver(request(bearer(good))), await resolver(request(bearer(good)))], [undefined, undefined])
      assert.equal(endpoint.fetches, 1)
      // Said, once: every caller is keyed by the next resolver (its IP), which nothing else would tell.
      assert.equal(warnings.length, 1)
      assert.match(warnings[0] ?? '', /failed: .+\. No keys yet, so bearer tokens are no identity \(the next resolver, such as the client IP, keys the request\) until it answers; tried again every 30 s$/)
      endpoint.mode = 'serve'
      t.mock.timers.tick(31_000)
      assert.equal(await resolver(request(bearer(good))), 'user:u-1')
      assert.equal(endpoint.fetches, 2)
      assert.match(warnings[1] ?? '', /answers again/)
      // A URL with a password: fetch refuses it, so no key would ever come. Said at once, the password masked.
      assert.throws(() => jwtClaim({ jwksUrl: endpoint.url.replace('http://', 'http://reader:hunter2@'), algorithms: ['ES256'] }), (error: Error) => {
        assert.match(error.message, /^jwksUrl must not carry a user name or password: fetch refuses such a URL, so no key would ever be fetched and no token verify \(got "http:\/\/\*\*\*@127\.0\.0\.1:\d+\/jwks\.json"\)$/)
        return !error.message.includes('hunter2')
      })
    } finally {
      endpoint.close()
    }
  })

  it('verifies a token once for the requests that carry it, and believes it no longer than it lasts, nor a minute', async (t) => {
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
    const verified = jwtVerifier({ secret, algorithms: ['HS256'] })
    const token = await hs256({ sub: '42' }, '90s')
    const first = await verified(request(bearer(token)))
    const again = await verified(request(bearer(token)))
    // The same payload, not verified again; shared by the requests, so frozen.
    assert.equal(again, first)
    assert.ok(first !== undefined && Object.isFrozen(first))
    assert.throws(() => { (first as Record<string, unknown>).sub = '43' }, TypeError)
    // After a minute it is verified again (a JWKS's withdrawn key would then stop it): a new payload, the same claims.
    t.mock.timers.tick(61_000)
    const later = await verified(request(bearer(token)))
    assert.notEqual(later, first)
    assert.equal(later?.sub, '42')
    // Past its exp (90 s), kept or not, it is no identity, as jose would have it.
    t.mock.timers.tick(30_000)
    assert.equal(await verified(request(bearer(token))), undefined)
    // A forged token that fails is not kept as verified, nor does it displace the good one's answer.
    const fresh = await hs256({ sub: '7' }, '5m')
    const forged = await hs256({ sub: '7' }, '5m', 'another-secret-of-enough-length!!')
    assert.equal(await verified(request(bearer(forged))), undefined)
    assert.equal((await verified(request(bearer(fresh))))?.sub, '7')
    assert.equal(await verified(request(bearer(forged))), undefined)
  })

  it('refuses configurations that would accept unverifiable tokens', () => {
    assert.throws(() => jwtClaim({ secret, algorithms: [] }), /must list the accepted algorithms/)
    assert.throws(() => jwtClaim({ secret, algorithms: ['none'] }), /'none' is never accepted/)
    assert.throws(() => jwtClaim({ algorithms: ['HS256'] }), /exactly one of secret, publicKey or jwksUrl/)
  })

  it('refuses misspelt options rather than ignoring them', () => {
    assert.throws(() => jwtClaim({ secret, algorithms: ['HS256'], claims: 'tenant' } as never), /claims is not a jwtClaim option/)
    assert.throws(() => clientIpKey({ trustProxies: 1 } as never), /trustProxies is not a clientIp option \(known: trustProxy, ipv6Prefix, header\)/)
    assert.throws(() => apiKey('x-api-key', { prefx: 'k' } as never), /prefx is not an apiKey option/)
    assert.throws(() => apiKey('x api key'), /header must be a header name/)
    assert.throws(() => clientIpKey({ trustProxy: 1, header: 'x-real-ip' as never }), /header must be 'x-forwarded-for' or 'forwarded' \(got "x-real-ip"\)/)
  })

  it('refuses, when made, options that would identify nobody, or check nothing, in silence', async () => {
    // An empty issuer, an empty list or an object made every token fail jose's check: no token was ever an identity.
    assert.throws(() => jwtClaim({ secret, algorithms: ['HS256'], issuer: '' }), /issuer must be a non-empty string or a non-empty list of them \(got ""\)/)
    assert.throws(() => jwtClaim({ secret, algorithms: ['HS256'], audience: [] }), /audience must be a non-empty string or a non-empty list of them/)
    assert.throws(() => jwtClaim({ secret, algorithms: ['HS256'], issuer: { iss: 'x' } as never }), /issuer must be/)
    assert.throws(() => jwtClaim({ secret, algorithms: ['HS256'], claim: '' }), /claim must be the name of a claim/)
    assert.throws(() => jwtClaim({ secret, algorithms: ['HS256'], claim: 5 as never }), /claim must be the name of a claim/)
    // The prefix keeps kinds apart: '' or a non-string made user:… and apikey:… keys meet or read "[object Object]:…".
    assert.throws(() => jwtClaim({ secret, algorithms: ['HS256'], prefix: '' }), /prefix must be 1 to 64 printable ASCII characters without spaces/)
    assert.throws(() => apiKey('x-api-key', { prefix: {} as never }), /prefix must be 1 to 64 printable ASCII/)
    // maxLength 0 made every key too long; NaN or a string, none.
    for (const maxLength of [0, -1, 1.5, Number.NaN, '64']) assert.throws(() => apiKey('x-api-key', { maxLength: maxLength as never }), /maxLength must be a positive integer/)
    // jwtClaim(null) was a TypeError reading its claim.
    assert.throws(() => jwtClaim(null as never), /options must be an object/)
    // What is still taken: lists of issuers and audiences, a claim other than sub, a prefix with a colon.
    const resolve = jwtClaim({ secret, algorithms: ['HS256'], issuer: ['a', 'b'], audience: 'api', claim: 'tenant', prefix: 'org:tenant' })
    const token = await new SignJWT({ tenant: 'acme' }).setProtectedHeader({ alg: 'HS256' }).setIssuer('b').setAudience('api').setExpirationTime('1h').sign(new TextEncoder().encode(secret))
    assert.equal(await resolve(request(bearer(token))), 'org:tenant:acme')
  })

  it('refuses, when made, a key that cannot verify the listed algorithms (every token would silently be no identity)', async () => {
    const rsaPem = await exportSPKI((await generateKeyPair('RS256')).publicKey)
    const edPem = await exportSPKI((await generateKeyPair('EdDSA')).publicKey)
    assert.throws(() => jwtClaim({ publicKey: 'not a pem', algorithms: ['RS256'] }), /publicKey must be a PEM public key/)
    assert.throws(() => jwtClaim({ publicKey: edPem, algorithms: ['ES256'] }), /publicKey cannot verify ES256, which needs an ec key \(got "ed25519"\)/)
    assert.throws(() => jwtClaim({ publicKey: rsaPem, algorithms: ['RS256', 'ES256'] }), /cannot verify ES256/)
    assert.throws(() => jwtClaim({ publicKey: rsaPem, algorithms: ['HS256'] }), /HS256 need a secret/)
    assert.throws(() => jwtClaim({ secret, algorithms: ['HS256', 'RS256'] }), /must all be HS256, HS384 or HS512 with a secret/)
    assert.throws(() => jwtClaim({ jwksUrl: 'ftp://keys.test/jwks', algorithms: ['ES256'] }), /jwksUrl must be an http/)
    // What jose refuses at verification: a curve that is not the algorithm's, RSA under 2048 bits, Ed448, an RSA-PSS key, a made-up name.
    const pem = (type: 'ec' | 'rsa' | 'rsa-pss' | 'ed448', options: object) => (generateKeyPairSync(type as 'ec', options as never) as unknown as { publicKey: KeyObject }).publicKey.export({ type: 'spki', format: 'pem' }) as string
    assert.throws(() => jwtClaim({ publicKey: pem('ec', { namedCurve: 'P-384' }), algorithms: ['ES256'] }), /cannot verify ES256, which needs a P-256 key \(got "P-384"\)/)
    assert.throws(() => jwtClaim({ publicKey: pem('rsa', { modulusLength: 1024 }), algorithms: ['RS256'] }), /cannot verify RS256: RSA keys under 2048 bits .* \(got "1024 bits"\)/)
    assert.throws(() => jwtClaim({ publicKey: pem('ed448', {}), algorithms: ['EdDSA'] }), /cannot verify EdDSA, which needs an ed25519 key \(got "ed448"\)/)
    assert.throws(() => jwtClaim({ publicKey: pem('rsa-pss', { modulusLength: 2048 }), algorithms: ['PS256'] }), /cannot verify PS256, which needs an rsa key \(got "rsa-pss"\)/)
    assert.throws(() => jwtClaim({ publicKey: rsaPem, algorithms: ['RS265'] }), /algorithms must be JWS algorithms jose verifies: HS256, .* \(got "RS265"\); did you mean "RS256"\?$/)
    assert.throws(() => jwtClaim({ secret: 'x'.repeat(32), algorithms: ['hs256'] }), /\(got "hs256"\); did you mean "HS256"\?$/)
  })

  it('refuses an HMAC secret shorter than its hash (RFC 7518 3.2), naming its length and never its value', () => {
    const short = 'password1234'
    assert.throws(() => jwtClaim({ secret: short, algorithms: ['HS256'] }), (error: Error) => {
      assert.match(error.message, /secret must be at least 32 bytes for HS256, as RFC 7518 3.2 requires: .* \(got "12 bytes"\)/)
      assert.ok(!error.message.includes(short))
      return true
    })
    assert.throws(() => jwtClaim({ secret: 'x'.repeat(40), algorithms: ['HS256', 'HS384'] }), /at least 48 bytes for HS256, HS384/)
    assert.doesNotThrow(() => jwtClaim({ secret: new Uint8Array(64), algorithms: ['HS512'] }))
  })

  it('one PEM key verifies every algorithm of its type that is listed (RS256 and PS256; EdDSA)', async () => {
    const rsa = await generateKeyPair('PS256', { extractable: true })
    const both = jwtClaim({ publicKey: await exportSPKI(rsa.publicKey), algorithms: ['RS256', 'PS256'] })
    const rsaPrivate = createPrivateKey(await exportPKCS8(rsa.privateKey))
    for (const alg of ['RS256', 'PS256']) {
      const token = await new SignJWT({ sub: alg }).setProtectedHeader({ alg }).setExpirationTime('5m').sign(rsaPrivate)
      assert.equal(await both(request(bearer(token))), `user:${alg}`)
    }
    const ed = await generateKeyPair('EdDSA')
    const edOnly = jwtClaim({ publicKey: await exportSPKI(ed.publicKey), algorithms: ['EdDSA'] })
    assert.equal(await edOnly(request(bearer(await new SignJWT({ sub: 'ed' }).setProtectedHeader({ alg: 'EdDSA' }).setExpirationTime('5m').sign(ed.privateKey)))), 'user:ed')
  })
})
