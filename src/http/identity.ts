/**
 * Key resolvers: who a request is. Each gives its kind as a prefix, so kinds
 * never collide (`user:42`, `apikey:abc`, `ip:203.0.113.7`), and `firstOf`
 * chains them: the first that resolves wins. A token that cannot be verified
 * is no identity: it falls through to the next resolver, never to a key the
 * client chose.
 */
import { createPublicKey, type KeyObject } from 'node:crypto'
import { createLocalJWKSet, createRemoteJWKSet, errors as joseErrors, jwtVerify, type JSONWebKeySet, type JWTPayload, type JWTVerifyGetKey } from 'jose'
import { warningTo } from '../core/callbacks.ts'
import { ArgumentError, maskCredentials, messageOf } from '../core/errors.ts'
import { checkOptions } from '../core/options.ts'
import { choiceHint } from '../core/suggest.ts'
import { checkPrefix } from '../limiter/limiter.ts'
import { clientIpResolver, type ClientIpOptions } from './client-ip.ts'
import type { HttpRequest, KeyResolver } from './handler.ts'
import { isHeaderName } from './match.ts'

/** The first resolver that gives a key. */
export function firstOf(...resolvers: KeyResolver[]): KeyResolver {
  if (resolvers.length === 0 || resolvers.some((r) => typeof r !== 'function')) {
    throw new ArgumentError('firstOf', resolvers, 'takes one or more key resolvers')
  }
  return async function firstResolved(request: HttpRequest) {
    for (const resolve of resolvers) {
      const key = await resolve(request)
      if (key !== undefined && key !== null && key !== '') return key
    }
    return undefined
  }
}

const API_KEY_OPTIONS = new Set(['prefix', 'maxLength', 'keys'])

export interface ApiKeyOptions {
  /** Key prefix. Default `apikey`. */
  prefix?: string
  /** A longer value is no key. Default 256. */
  maxLength?: number
  /**
   * The keys that exist: any other value is no identity and falls through to the
   * next resolver. Without it every value is a key, and a client that makes up a
   * new one per request gets a new quota each time.
   */
  keys?: readonly string[] | ReadonlySet<string> | ((key: string) => boolean)
}

/** The value of a request header (e.g. `x-api-key`), as `<prefix>:<value>`. */
export function apiKey(header = 'x-api-key', options: ApiKeyOptions = {}): KeyResolver {
  if (!isHeaderName(header)) throw new ArgumentError('header', header, 'must be a header name')
  checkOptions('options', 'an apiKey option', options, API_KEY_OPTIONS)
  const name = header.toLowerCase()
  const prefix = checkPrefix(options.prefix ?? 'apikey')
  const maxLength = options.maxLength ?? 256
  if (typeof maxLength !== 'number' || !Number.isInteger(maxLength) || maxLength < 1) throw new ArgumentError('maxLength', maxLength, 'must be a positive integer (the longest value that is a key)')
  const known = knownKeys(options.keys)
  return function apiKeyOf(request) {
    const value = request.header(name)?.trim()
    // An over-long value is no key: it would only cost memory (the limiter hashes long keys anyway).
    if (value === undefined || value === '' || value.length > maxLength) return undefined
    if (known !== undefined && !known(value)) return undefined
    return `${prefix}:${value}`
  }
}

function knownKeys(keys: ApiKeyOptions['keys']): ((key: string) => boolean) | undefined {
  if (keys === undefined || typeof keys === 'function') return keys
  const list = keys instanceof Set ? [...keys] : keys
  if (!Array.isArray(list) || list.some((key) => typeof key !== 'string' || key.trim() === '' || key !== key.trim())) {
    throw new ArgumentError('keys', keys, 'must be a list (or Set) of key strings without surrounding spaces, or a function of the key')
  }
  if (list.length === 0) throw new ArgumentError('keys', keys, 'lists no key: every request would fall through; leave keys out to accept any value')
  const set = new Set(list)
  return (key) => set.has(key)
}

export interface JwtClaimOptions {
  /** The claim that identifies the caller. Default `sub`. */
  claim?: string
  /** Key prefix. Default `user`. */
  prefix?: string
  /** Accepted algorithms, always explicit (e.g. `['HS256']`, `['RS256', 'ES256']`). */
  algorithms: string[]
  /** HS* shared secret. */
  secret?: string | Uint8Array
  /** RS* / ES* / PS* / EdDSA public key, PEM (SPKI). */
  publicKey?: string
  /** A JWKS endpoint; keys are fetched and cached by jose. */
  jwksUrl?: string
  issuer?: string | string[]
  audience?: string | string[]
  /**
   * Told when the JWKS endpoint fails (tokens then verify with the keys it
   * gave last, or, before it ever answered, are no identity) and when it
   * answers again. Default: a process warning (code SLUICE_JWKS).
   */
  onWarning?: (message: string) => void
}

export type JwtVerifierOptions = Omit<JwtClaimOptions, 'claim' | 'prefix'>

/** jwtClaim's options: it hands them all to jwtVerifier, which checks them. */
const JWT_OPTIONS = new Set(['claim', 'prefix', 'algorithms', 'secret', 'publicKey', 'jwksUrl', 'issuer', 'audience', 'onWarning'])

/**
 * The claim of a verified `Authorization: Bearer <jwt>`, as `<prefix>:<claim>`.
 * Unsigned (`alg: none`), forged, expired, not-yet-valid or otherwise
 * unverifiable tokens give no key.
 */
export function jwtClaim(options: JwtClaimOptions): KeyResolver {
  const verified = jwtVerifier(options)
  const claim = options.claim ?? 'sub'
  if (typeof claim !== 'string' || claim === '') throw new ArgumentError('claim', claim, "must be the name of a claim, e.g. 'sub'")
  const prefix = checkPrefix(options.prefix ?? 'user')
  return async function jwtClaimOf(request) {
    const value = claimOf(await verified(request), claim)
    return value === undefined ? undefined : `${prefix}:${value}`
  }
}

/** A claim of a verified token as a string (strings and numbers only), or undefined. */
export function claimOf(payload: JWTPayload | undefined, claim: string): string | undefined {
  const value = payload?.[claim]
  if ((typeof value !== 'string' || value === '') && typeof value !== 'number') return undefined
  return String(value)
}

/**
 * The payload of a request's verified bearer token, or undefined. Each
 * request's token is verified once, however many resolvers ask (an identity
 * and a tier, say). `shared.jwks`, the keys of `options.jwksUrl` as another
 * verifier had them, carries them over (the gateway's, from one config to the next).
 */
export function jwtVerifier(options: JwtVerifierOptions, shared: { jwks?: JwksKeys | undefined } = {}): (request: HttpRequest) => Promise<JWTPayload | undefined> {
  checkOptions('options', 'a jwtClaim option', options, JWT_OPTIONS)
  if (!Array.isArray(options.algorithms) || options.algorithms.length === 0 || options.algorithms.some((a) => typeof a !== 'string' || a.toLowerCase() === 'none')) {
    throw new ArgumentError('algorithms', options.algorithms, "must list the accepted algorithms (e.g. ['HS256']); 'none' is never accepted")
  }
  const sources = [options.secret, options.publicKey, options.jwksUrl].filter((s) => s !== undefined)
  if (sources.length !== 1) throw new ArgumentError('secret', '...', 'exactly one of secret, publicKey or jwksUrl is required')
  // jose checks a claim against what it is given: an empty issuer, an empty list or an object matches no token, silently.
  for (const name of ['issuer', 'audience'] as const) {
    const value: unknown = options[name]
    if (value !== undefined && !(typeof value === 'string' && value !== '') && !(Array.isArray(value) && value.length > 0 && value.every((v) => typeof v === 'string' && v !== ''))) {
      throw new ArgumentError(name, value, 'must be a non-empty string or a non-empty list of them')
    }
  }
  if (options.onWarning !== undefined && typeof options.onWarning !== 'function') throw new ArgumentError('onWarning', options.onWarning, 'must be a function of the message')
  const key = verificationKey(options, shared.jwks)
  const verifyOptions = {
    algorithms: options.algorithms,
    ...(options.issuer !== undefined ? { issuer: options.issuer } : {}),
    ...(options.audience !== undefined ? { audience: options.audience } : {}),
  }
  const verify = async (token: string): Promise<JWTPayload | undefined> => {
    try {
      // Two calls only because jose's overloads take a key or a key getter, not a union.
      const { payload } = typeof key === 'function'
        ? await jwtVerify(token, key, verifyOptions)
        : await jwtVerify(token, key, verifyOptions)
      return payload
    } catch {
      return undefined
    }
  }
  const verifiedTokens = new VerifiedTokens()
  const verifyOnce = (token: string): Promise<JWTPayload | undefined> => {
    const known = verifiedTokens.get(token, Date.now())
    if (known !== undefined) return Promise.resolve(known)
    return verify(token).then((payload) => {
      if (payload !== undefined) verifiedTokens.add(token, payload, Date.now())
      return payload
    })
  }
  const perRequest = new WeakMap<HttpRequest, Promise<JWTPayload | undefined>>()
  return function verifiedPayload(request) {
    let payload = perRequest.get(request)
    if (payload === undefined) {
      const authorization = request.header('authorization')
      const match = authorization === undefined ? null : /^Bearer\s+([A-Za-z0-9_.-]{1,8192})$/i.exec(authorization.trim())
      payload = match === null ? Promise.resolve(undefined) : verifyOnce(match[1] as string)
      perRequest.set(request, payload)
    }
    return payload
  }
}

/** Verified tokens kept at most: a client sends one token, so 10,000 clients' are each verified about once a minute. */
const MAX_VERIFIED_TOKENS = 10_000
/** How long a verified token is believed before it is checked again, so that a key withdrawn from a JWKS stops it within this time. */
const VERIFIED_FOR_MS = 60_000

/**
 * Tokens that verified, with their payloads: a client sends the same token
 * with every request, and jose takes 100 to 150 µs to verify one (HS256 and
 * RS256 alike, through WebCrypto), more than the rest of a gateway's work on
 * a request. A token is believed until it expires (jose's rule: not at or
 * after `exp`), and for VERIFIED_FOR_MS at most; its `nbf` had passed when it
 * verified, so it stays passed. Tokens that failed are not kept: they are no
 * identity, and a client making them up could fill the map. The oldest go
 * first when it is full. Payloads are shared by the requests that carry the
 * token, so they are frozen.
 */
class VerifiedTokens {
  private readonly tokens = new Map<string, { payload: JWTPayload; until: number }>()

  get(token: string, now: number): JWTPayload | undefined {
    const entry = this.tokens.get(token)
    if (entry === undefined) return undefined
    if (now < entry.until) return entry.payload
    this.tokens.delete(token)
    return undefined
  }

  add(token: string, payload: JWTPayload, now: number): void {
    const expires = typeof payload.exp === 'number' ? payload.exp * 1000 : Infinity
    const until = Math.min(now + VERIFIED_FOR_MS, expires)
    if (!(now < until)) return
    if (this.tokens.size >= MAX_VERIFIED_TOKENS) this.tokens.delete(this.tokens.keys().next().value as string)
    this.tokens.set(token, { payload: deepFreeze(payload), until })
  }
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value)
    for (const inner of Object.values(value)) deepFreeze(inner)
  }
  return value
}

/**
 * The JWS algorithms jose verifies, and the public key each needs: its type and
 * curve (RFC 7518, RFC 8037), RSA at 2048 bits or more. jose refuses any other
 * key at verification, which would make every token "no identity".
 */
const PUBLIC_KEY_ALGORITHMS: Record<string, { type: string; curve?: string }> = {
  RS256: { type: 'rsa' }, RS384: { type: 'rsa' }, RS512: { type: 'rsa' },
  PS256: { type: 'rsa' }, PS384: { type: 'rsa' }, PS512: { type: 'rsa' },
  ES256: { type: 'ec', curve: 'prime256v1' }, ES384: { type: 'ec', curve: 'secp384r1' }, ES512: { type: 'ec', curve: 'secp521r1' },
  EdDSA: { type: 'ed25519' }, Ed25519: { type: 'ed25519' },
}
const HMAC_ALGORITHMS = ['HS256', 'HS384', 'HS512']
const CURVE_NAMES: Record<string, string> = { prime256v1: 'P-256', secp384r1: 'P-384', secp521r1: 'P-521' }

/**
 * The key tokens are verified with, checked against the algorithms now: a key
 * that cannot verify them would otherwise make every token "no identity",
 * silently, from the first request on.
 */
function verificationKey(options: JwtVerifierOptions, jwks: JwksKeys | undefined): Uint8Array | KeyObject | JWTVerifyGetKey {
  const unknown = options.algorithms.filter((a) => !HMAC_ALGORITHMS.includes(a) && PUBLIC_KEY_ALGORITHMS[a] === undefined)
  if (unknown.length > 0) {
    const known = [...HMAC_ALGORITHMS, ...Object.keys(PUBLIC_KEY_ALGORITHMS)]
    throw new ArgumentError('algorithms', unknown.join(', '), `must be JWS algorithms jose verifies: ${known.join(', ')}`, unknown.length === 1 ? choiceHint(unknown[0], known) : undefined)
  }
  const hmac = options.algorithms.filter((a) => HMAC_ALGORITHMS.includes(a))
  if (options.secret !== undefined) {
    if (hmac.length !== options.algorithms.length) throw new ArgumentError('algorithms', options.algorithms, 'must all be HS256, HS384 or HS512 with a secret (a public key or jwksUrl verifies the others)')
    const secret = typeof options.secret === 'string' ? new TextEncoder().encode(options.secret) : options.secret
    // RFC 7518 3.2: a key at least as long as the hash. A shorter one can be guessed offline from any token it
    // signed, and a guessed secret signs any identity and tier. (The secret's length is reported, never its value.)
    const strongest = Math.max(...hmac.map((algorithm) => Number(algorithm.slice(2)) / 8))
    if (!(secret instanceof Uint8Array) || secret.length < strongest) {
      throw new ArgumentError('secret', secret instanceof Uint8Array ? `${secret.length} bytes` : typeof secret, `must be at least ${strongest} bytes for ${hmac.join(', ')}, as RFC 7518 3.2 requires: a shorter one can be guessed offline from any token it signed`)
    }
    return secret
  }
  if (hmac.length > 0) throw new ArgumentError('algorithms', options.algorithms, `${hmac.join(', ')} need a secret, not a public key or jwksUrl`)
  if (options.jwksUrl !== undefined) {
    if (typeof options.jwksUrl !== 'string' || !URL.canParse(options.jwksUrl) || !/^https?:$/.test(new URL(options.jwksUrl).protocol)) {
      throw new ArgumentError('jwksUrl', options.jwksUrl, 'must be an http:// or https:// URL')
    }
    const { username, password } = new URL(options.jwksUrl)
    if (username !== '' || password !== '') {
      throw new ArgumentError('jwksUrl', maskCredentials(options.jwksUrl), 'must not carry a user name or password: fetch refuses such a URL, so no key would ever be fetched and no token verify')
    }
    return (jwks?.url === options.jwksUrl ? jwks : jwksKeys(options.jwksUrl, options.onWarning)).key
  }
  let key: KeyObject
  try {
    key = createPublicKey(options.publicKey as string)
  } catch (error) {
    const shown = typeof options.publicKey === 'string' ? `${options.publicKey.slice(0, 40)}...` : options.publicKey
    throw new ArgumentError('publicKey', shown, `must be a PEM public key ("-----BEGIN PUBLIC KEY-----"): ${(error as Error).message}`)
  }
  // One key object serves every listed algorithm it fits (RS256 and PS256 with one RSA key, say).
  const type = key.asymmetricKeyType ?? 'unknown'
  const details = key.asymmetricKeyDetails ?? {}
  for (const algorithm of options.algorithms) {
    const needs = PUBLIC_KEY_ALGORITHMS[algorithm] as { type: string; curve?: string }
    if (type !== needs.type) throw new ArgumentError('publicKey', type, `cannot verify ${algorithm}, which needs an ${needs.type} key`)
    if (needs.curve !== undefined && details.namedCurve !== needs.curve) {
      throw new ArgumentError('publicKey', CURVE_NAMES[details.namedCurve ?? ''] ?? details.namedCurve, `cannot verify ${algorithm}, which needs a ${CURVE_NAMES[needs.curve]} key`)
    }
    if (type === 'rsa' && (details.modulusLength ?? 0) < 2048) {
      throw new ArgumentError('publicKey', `${details.modulusLength} bits`, `cannot verify ${algorithm}: RSA keys under 2048 bits are refused by jose (and too weak)`)
    }
  }
  return key
}

/** After a failed fetch, how long requests use the last keys before one tries the endpoint again. */
const JWKS_RETRY_MS = 30_000

/** A JWKS endpoint's keys, as one verifier after another may share them (the gateway's, across reloads). */
export interface JwksKeys {
  readonly url: string
  readonly key: JWTVerifyGetKey
}

/** The keys of the JWKS endpoint at `url`, fetched when first asked for; its outages and recoveries go to `onWarning`. */
export function jwksKeys(url: string, onWarning?: (message: string) => void): JwksKeys {
  return { url, key: outageTolerantJwks(new URL(url), warningTo(onWarning, 'SLUICE_JWKS')) }
}

/**
 * A JWKS endpoint's keys that outlive the endpoint's outages. jose refetches a
 * set older than 10 minutes before it verifies anything, and when the fetch
 * fails every token fails: with the identity provider down, every caller
 * would lose its identity (and tier) and each request would wait out the
 * fetch. Once keys are known, a stale set answers at once while the refresh
 * runs behind it; a failed refresh keeps the last set. A key the set never
 * had is still no identity. Only the first fetch, and an unknown key id
 * (jose's rotation path), make a request wait; after a failed first fetch,
 * tokens are no identity without waiting until the retry is due.
 */
function outageTolerantJwks(url: URL, warn: (message: string) => void): JWTVerifyGetKey {
  const remote = createRemoteJWKSet(url)
  let known: JSONWebKeySet | undefined
  let lastKeys: JWTVerifyGetKey | undefined
  let fetchedAt = 0
  let failedAt = Number.NEGATIVE_INFINITY
  // Said once when an outage begins and once when it ends, not at each retry.
  let failing = false
  const remember = () => {
    const keys = remote.jwks()
    // A set other than the last is a fetch that succeeded; the same one came from jose's cache.
    if (keys !== undefined && keys !== known) {
      known = keys
      lastKeys = createLocalJWKSet(keys)
      fetchedAt = Date.now()
      if (failing) warn(`sluice: the JWKS endpoint ${url.href} answers again; bearer tokens verify with the keys it gave now`)
      failing = false
    }
  }
  const failed = (error: unknown) => {
    failedAt = Date.now()
    if (failing) return
    failing = true
    const cause = (error as { cause?: unknown } | undefined)?.cause
    const why = maskCredentials(`${messageOf(error)}${cause instanceof Error && !messageOf(error).includes(cause.message) ? ` (${cause.message})` : ''}`)
    warn(lastKeys === undefined
      ? `sluice: the JWKS endpoint ${url.href} failed: ${why}. No keys yet, so bearer tokens are no identity (the next resolver, such as the client IP, keys the request) until it answers; tried again every ${JWKS_RETRY_MS / 1000} s`
      : `sluice: the JWKS endpoint ${url.href} failed: ${why}. Bearer tokens go on verifying with the keys it gave ${Math.round((failedAt - fetchedAt) / 60_000)} min ago; tried again every ${JWKS_RETRY_MS / 1000} s`)
  }
  return async function jwksKey(header, token) {
    // Never fetched, and the last try failed: no request waits on the endpoint until the retry is due.
    if (lastKeys === undefined && Date.now() - failedAt < JWKS_RETRY_MS) throw new joseErrors.JWKSTimeout('the JWKS endpoint failed less than 30 s ago')
    if (lastKeys !== undefined && !remote.fresh) {
      if (!remote.reloading && Date.now() - failedAt >= JWKS_RETRY_MS) remote.reload().then(remember, failed)
      return lastKeys(header, token)
    }
    try {
      const key = await remote(header, token)
      remember()
      return key
    } catch (error) {
      // The token's own faults (no such key id, an algorithm the key does not allow) are not the endpoint's.
      if (error instanceof joseErrors.JWKSNoMatchingKey || error instanceof joseErrors.JWKSMultipleMatchingKeys || error instanceof joseErrors.JOSENotSupported) throw error
      failed(error)
      if (lastKeys === undefined) throw error
      return lastKeys(header, token)
    }
  }
}

/** The client IP as a resolver, to compose with others (the handler's default key, without its warning). */
export function clientIpKey(options: ClientIpOptions = {}): KeyResolver {
  const resolve = clientIpResolver(options)
  return function clientIpOf(request) {
    return resolve(request.remoteAddress, request.header).key
  }
}
