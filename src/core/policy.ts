/**
 * Policy validation: turns what a user wrote into frozen `ResolvedPolicy`
 * objects once, at construction, so no decision ever meets a bad number.
 */
import { ArgumentError, PolicyError } from './errors.ts'
import { choiceHint, didYouMean } from './suggest.ts'
import type { AlgorithmName, ResolvedPolicy } from './types.ts'

/**
 * Arithmetic inside the algorithms is exact integer arithmetic on doubles (in
 * TypeScript and in Redis Lua alike), so products such as capacity x interval
 * must stay below 2^53.
 */
const MAX_EXACT = Number.MAX_SAFE_INTEGER

/** The longest reservation: also the longest delay `setTimeout` can sleep. */
export const MAX_WAIT_MS = 2 ** 31 - 1

/** Longest block (blockMs): ten years. */
const MAX_BLOCK_MS = 315_360_000_000

/** Longest policy name: it becomes part of store keys and header values. */
const MAX_NAME_LENGTH = 64

/** The fields of each algorithm's policy (besides `algorithm` and `name`). */
export const POLICY_FIELDS: Record<AlgorithmName, readonly string[]> = {
  'fixed-window': ['limit', 'windowMs', 'blockMs'],
  'sliding-log': ['limit', 'windowMs', 'blockMs'],
  'sliding-window': ['limit', 'windowMs', 'blockMs'],
  'token-bucket': ['capacity', 'refillTokens', 'refillIntervalMs', 'refill', 'blockMs'],
  'leaky-bucket': ['capacity', 'leakTokens', 'leakIntervalMs', 'mode', 'blockMs'],
}

/** Every name a policy's field may have, `algorithm` first. */
export const POLICY_FIELD_NAMES: readonly string[] = ['algorithm', ...new Set(Object.values(POLICY_FIELDS).flat())]

/** The fields that take one of a few words, and the words (the first is the default). */
const REFILLS = ['greedy', 'interval'] as const
const MODES = ['police', 'shape'] as const
export const POLICY_CHOICES: Readonly<Record<string, readonly [string, ...string[]]>> = { refill: REFILLS, mode: MODES }

/** Fields a policy may leave out. */
export const OPTIONAL_POLICY_FIELDS: ReadonlySet<string> = new Set(['refill', 'mode', 'blockMs'])

const ALGORITHMS = Object.keys(POLICY_FIELDS) as AlgorithmName[]

/** Algorithms that can grant a call now that proceeds later (`maxWaitMs > 0`). */
export const RESERVABLE: ReadonlySet<AlgorithmName> = new Set([
  'fixed-window',
  'token-bucket',
  'leaky-bucket',
])

/**
 * Policies one limiter decides together. Every decision reads and writes each
 * of them (one Redis call carries all their keys: near 17,000 the client
 * cannot even build the call); APIs combine a few.
 */
export const MAX_POLICIES = 1000

/** Validates one policy or an array of them (all-or-nothing) into frozen policies. */
export function resolvePolicies(input: unknown): readonly ResolvedPolicy[] {
  const list = Array.isArray(input) ? input : [input]
  if (list.length === 0) throw new ArgumentError('policies', input, 'must hold at least one policy')
  if (list.length > MAX_POLICIES) throw new ArgumentError('policies', input, `must hold at most ${MAX_POLICIES} policies: each decision reads and writes every one`)
  const resolved = list.map((policy: unknown) => resolvePolicy(policy))
  const seen = new Set<string>()
  for (const policy of resolved) {
    if (seen.has(policy.name)) {
      throw new PolicyError('name', policy.name, 'is used by two policies of one limiter; names must be unique', policy.name)
    }
    seen.add(policy.name)
  }
  return Object.freeze(resolved)
}

/** Validates one policy; throws a `PolicyError` naming the field and the bad value. */
export function resolvePolicy(input: unknown): ResolvedPolicy {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new PolicyError('policy', input, 'must be an object with an "algorithm" field')
  }
  const raw = input as Record<string, unknown>
  const algorithm = raw.algorithm
  if (typeof algorithm !== 'string' || !ALGORITHMS.includes(algorithm as AlgorithmName)) {
    const problem = algorithm === undefined ? 'is required:' : 'must be'
    throw new PolicyError('algorithm', algorithm, `${problem} one of ${ALGORITHMS.join(', ')}`, nameHint(raw), choiceHint(algorithm, ALGORITHMS))
  }
  const unknown = unknownFields(raw, algorithm as AlgorithmName)[0]
  if (unknown !== undefined) throw unknown
  const hint = nameHint(raw)
  let policy: ResolvedPolicy
  switch (algorithm as AlgorithmName) {
    case 'fixed-window':
    case 'sliding-log':
    case 'sliding-window': {
      const limit = positiveInteger(raw, 'limit', hint)
      const windowMs = positiveInteger(raw, 'windowMs', hint)
      if (algorithm === 'sliding-window') exactProduct(limit, windowMs, 'limit x windowMs', hint)
      const name = nameOf(raw, `${algorithm}:${limit}/${formatDuration(windowMs)}`)
      policy = { algorithm: algorithm as 'fixed-window' | 'sliding-log' | 'sliding-window', name, limit, windowMs }
      break
    }
    case 'token-bucket': {
      const capacity = positiveInteger(raw, 'capacity', hint)
      const refillTokens = positiveInteger(raw, 'refillTokens', hint)
      const refillIntervalMs = positiveInteger(raw, 'refillIntervalMs', hint)
      const refill = oneOf(raw, 'refill', REFILLS, hint)
      exactProduct(capacity, refillIntervalMs, 'capacity x refillIntervalMs', hint)
      const suffix = refill === 'interval' ? ':interval' : ''
      const name = nameOf(raw, `token-bucket:${capacity}@${refillTokens}/${formatDuration(refillIntervalMs)}${suffix}`)
      policy = { algorithm: 'token-bucket', name, capacity, refillTokens, refillIntervalMs, refill }
      break
    }
    case 'leaky-bucket': {
      const capacity = positiveInteger(raw, 'capacity', hint)
      const leakTokens = positiveInteger(raw, 'leakTokens', hint)
      const leakIntervalMs = positiveInteger(raw, 'leakIntervalMs', hint)
      const mode = oneOf(raw, 'mode', MODES, hint)
      exactProduct(capacity, leakIntervalMs, 'capacity x leakIntervalMs', hint)
      // The debt can grow past capacity by one reservation: keep that exact too.
      exactProduct(leakTokens, MAX_WAIT_MS, 'leakTokens x 2^31', hint)
      const suffix = mode === 'shape' ? ':shape' : ''
      const name = nameOf(raw, `leaky-bucket:${capacity}@${leakTokens}/${formatDuration(leakIntervalMs)}${suffix}`)
      policy = { algorithm: 'leaky-bucket', name, capacity, leakTokens, leakIntervalMs, mode }
      break
    }
  }
  if (raw.blockMs !== undefined) {
    const blockMs = blockMsOf(raw, hint)
    if (policy.algorithm === 'leaky-bucket' && policy.mode === 'shape') {
      throw new PolicyError('blockMs', blockMs, 'applies to policies that refuse calls; a shape-mode leaky bucket queues them (use mode: police)', hint)
    }
    // Part of the derived name: a block of another length is another policy's state.
    policy = { ...policy, name: raw.name === undefined ? `${policy.name}!${formatDuration(blockMs)}` : policy.name, blockMs }
  }
  return Object.freeze(policy)
}

/**
 * Every problem of one policy, where resolvePolicy stops at the first (a
 * config file lists them all): each field judged on its own, in the order the
 * algorithm names them; where each is right, what they must be together.
 * Empty for a valid policy.
 */
export function policyProblems(input: unknown): PolicyError[] {
  try {
    resolvePolicy(input)
    return []
  } catch (error) {
    if (!(error instanceof PolicyError)) throw error
    const raw = input as Record<string, unknown>
    // Without an algorithm, no field can be judged.
    if (error.field === 'policy' || error.field === 'algorithm') return [error]
    const algorithm = raw.algorithm as AlgorithmName
    const hint = nameHint(raw)
    const problems = unknownFields(raw, algorithm)
    const check = (judge: () => unknown) => {
      try {
        judge()
      } catch (problem) {
        if (!(problem instanceof PolicyError)) throw problem
        problems.push(problem)
      }
    }
    const unknownNames = problems.map((problem) => problem.field)
    for (const field of POLICY_FIELDS[algorithm]) {
      // A field written misspelt (windowMS) is named as such already: not again as missing.
      if (raw[field] === undefined && unknownNames.some((name) => didYouMean(name, [field]) !== undefined)) continue
      const choices = POLICY_CHOICES[field]
      if (choices !== undefined) check(() => oneOf(raw, field, choices, hint))
      else if (field === 'blockMs') check(() => raw.blockMs === undefined || blockMsOf(raw, hint))
      else check(() => positiveInteger(raw, field, hint))
    }
    check(() => nameOf(raw, ''))
    return problems.length > 0 ? problems : [error]
  }
}

/** A problem for each field the policy has that its algorithm does not know. */
function unknownFields(raw: Record<string, unknown>, algorithm: AlgorithmName): PolicyError[] {
  const known = POLICY_FIELDS[algorithm]
  return Object.keys(raw)
    .filter((field) => field !== 'algorithm' && field !== 'name' && !known.includes(field) && raw[field] !== undefined)
    .map((field) => new PolicyError(field, raw[field], `is not a field of a ${algorithm} policy (fields: ${known.join(', ')}, name)`, nameHint(raw), didYouMean(field, [...known, 'name']) ?? peerHint(field, known)))
}

/**
 * Fields as other limiters name them, and the field of ours that says the
 * same (the first of `ours` that the algorithm has), for a policy written
 * from another library's docs. `as` is what to know in moving it over.
 */
const PEER_FIELDS: Readonly<Record<string, { ours: readonly string[]; theirs: string; as?: string }>> = {
  points: { ours: ['limit', 'capacity'], theirs: "rate-limiter-flexible's points" },
  duration: { ours: ['windowMs'], theirs: "rate-limiter-flexible's duration", as: 'in milliseconds, where duration is seconds' },
  blockDuration: { ours: ['blockMs'], theirs: "rate-limiter-flexible's blockDuration", as: 'in milliseconds, where blockDuration is seconds' },
  max: { ours: ['limit', 'capacity'], theirs: "express-rate-limit's and @fastify/rate-limit's max" },
  timeWindow: { ours: ['windowMs'], theirs: "@fastify/rate-limit's timeWindow", as: 'in milliseconds' },
  burst: { ours: ['capacity'], theirs: 'a burst' },
  burstCapacity: { ours: ['capacity'], theirs: "Spring Cloud Gateway's burstCapacity" },
  replenishRate: { ours: ['refillTokens'], theirs: "Spring Cloud Gateway's replenishRate", as: 'and a second is refillIntervalMs: 1000' },
  rate: { ours: ['refillTokens', 'leakTokens'], theirs: 'a rate' },
  limit: { ours: ['capacity'], theirs: "a bucket's limit" },
  capacity: { ours: ['limit'], theirs: "a window's capacity" },
}

/** `rate-limiter-flexible's points is limit here`, where `field` is another library's name for one of `known`. */
function peerHint(field: string, known: readonly string[]): string | undefined {
  const peer = Object.hasOwn(PEER_FIELDS, field) ? PEER_FIELDS[field] : undefined
  const ours = peer?.ours.find((name) => known.includes(name))
  if (peer === undefined || ours === undefined) return undefined
  const per = ours === 'refillTokens' ? ' per refillIntervalMs' : ours === 'leakTokens' ? ' per leakIntervalMs' : ''
  return `${peer.theirs} is ${ours}${per} here${peer.as === undefined ? '' : `, ${peer.as}`}`
}

function blockMsOf(raw: Record<string, unknown>, hint: string | undefined): number {
  const blockMs = positiveInteger(raw, 'blockMs', hint)
  // Its end is kept as an epoch ms: exact for blocks far longer than anyone means.
  if (blockMs > MAX_BLOCK_MS) throw new PolicyError('blockMs', blockMs, `must be at most ${MAX_BLOCK_MS} (ten years)`, hint)
  return blockMs
}

/** The policy's limit as reported in decisions: its limit, or its capacity. */
export function limitOf(policy: ResolvedPolicy): number {
  return 'limit' in policy ? policy.limit : policy.capacity
}

/** Checks a per-call cost against every policy: a positive integer no policy's limit is below. */
export function checkCost(cost: unknown, policies: readonly ResolvedPolicy[]): number {
  if (typeof cost !== 'number' || !Number.isSafeInteger(cost) || cost < 1) {
    throw new ArgumentError('cost', cost, 'must be a positive integer')
  }
  for (const policy of policies) {
    const limit = limitOf(policy)
    if (cost > limit) {
      throw new ArgumentError('cost', cost, `exceeds the limit ${limit} of policy "${policy.name}", so it could never be allowed`)
    }
  }
  return cost
}

/** Checks `maxWaitMs` and that every policy can reserve when it is above 0. */
export function checkMaxWait(maxWaitMs: unknown, policies: readonly ResolvedPolicy[]): number {
  if (typeof maxWaitMs !== 'number' || !Number.isFinite(maxWaitMs) || maxWaitMs < 0 || maxWaitMs > MAX_WAIT_MS) {
    throw new ArgumentError('maxWaitMs', maxWaitMs, `must be a number of milliseconds from 0 to ${MAX_WAIT_MS}`, numberHint('maxWaitMs', maxWaitMs))
  }
  if (maxWaitMs > 0) {
    for (const policy of policies) {
      if (policy.blockMs !== undefined) {
        throw new ArgumentError('maxWaitMs', maxWaitMs, `cannot be used with policy "${policy.name}": a policy with blockMs refuses, it does not queue`)
      }
      if (!RESERVABLE.has(policy.algorithm)) {
        throw new ArgumentError(
          'maxWaitMs',
          maxWaitMs,
          `cannot be used with policy "${policy.name}": ${policy.algorithm} cannot reserve (only ${[...RESERVABLE].join(', ')} can)`,
        )
      }
    }
  }
  return Math.floor(maxWaitMs)
}

/** Milliseconds in each unit a duration is written in, largest first: what parseDuration reads, formatDuration writes. */
const DURATION_UNITS: ReadonlyMap<string, number> = new Map([['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1000], ['ms', 1]])

/** "500ms", "10s", "1m", "1.5h", "1d" or "250" (ms) to milliseconds; undefined for anything else, or for none. */
export function parseDuration(text: string): number | undefined {
  const match = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?$/.exec(text.trim())
  if (match === null) return undefined
  const ms = Math.round(Number(match[1]) * (DURATION_UNITS.get(match[2] ?? 'ms') as number))
  return ms > 0 && Number.isSafeInteger(ms) ? ms : undefined
}

/** "60000" -> "1m", "1500" -> "1500ms": the largest unit that divides exactly. */
export function formatDuration(ms: number): string {
  for (const [unit, size] of DURATION_UNITS) {
    if (ms % size === 0) return `${ms / size}${unit}`
  }
  return `${ms}ms`
}

function nameHint(raw: Record<string, unknown>): string | undefined {
  return typeof raw.name === 'string' ? raw.name : undefined
}

function nameOf(raw: Record<string, unknown>, derived: string): string {
  const name = raw.name
  if (name === undefined) return derived
  if (typeof name !== 'string' || name.length === 0 || name.length > MAX_NAME_LENGTH || !/^[\x21-\x7e]+$/.test(name)) {
    throw new PolicyError('name', name, `must be 1 to ${MAX_NAME_LENGTH} printable ASCII characters without spaces`)
  }
  if (name.includes('"') || name.includes('\\') || name.includes('{') || name.includes('}')) {
    throw new PolicyError('name', name, 'must not contain quotes, backslashes or braces (it is used in headers and Redis keys)')
  }
  return name
}

function positiveInteger(raw: Record<string, unknown>, field: string, policy: string | undefined): number {
  const value = raw[field]
  if (value === undefined) throw new PolicyError(field, value, 'is required', policy)
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    throw new PolicyError(field, value, 'must be a finite number', policy, numberHint(field, value))
  }
  if (!Number.isInteger(value) || value < 1) throw new PolicyError(field, value, 'must be a positive integer', policy)
  if (value > MAX_EXACT) throw new PolicyError(field, value, `must be at most ${MAX_EXACT}`, policy)
  return value
}

/** For a number written as text: the number (`"5"` is 5), or a duration in milliseconds (`windowMs: 1m` is 60000); nothing for a value not text. */
export function numberHint(field: string, text: unknown): string | undefined {
  if (typeof text !== 'string') return undefined
  if (/^\s*\d+\s*$/.test(text)) return `write it as a number, without quotes: ${Number(text)}`
  // YAML 1.2 and JSON read 1_000 and 1,000 as text.
  if (/^\s*\d{1,3}(?:_\d{3})+\s*$|^\s*\d{1,3}(?:,\d{3})+\s*$/.test(text)) return `write it as a number, without separators: ${text.trim().replace(/[_,]/g, '')}`
  const ms = field.endsWith('Ms') && /[a-z]\s*$/.test(text) ? parseDuration(text) : undefined
  return ms === undefined ? undefined : `${field} is in milliseconds: ${ms} for ${text.trim()}`
}

function oneOf<T extends string>(
  raw: Record<string, unknown>,
  field: string,
  choices: readonly [T, ...T[]],
  policy: string | undefined,
): T {
  const value = raw[field]
  if (value === undefined) return choices[0]
  if (typeof value !== 'string' || !choices.includes(value as T)) {
    throw new PolicyError(field, value, `must be one of ${choices.join(', ')}`, policy, choiceHint(value, choices))
  }
  return value as T
}

function exactProduct(a: number, b: number, what: string, policy: string | undefined): void {
  if (a * b > MAX_EXACT) {
    // The product is what is too large: show the other factor too, or a huge window reads as a bad limit.
    throw new PolicyError(what.split(' x ')[0] ?? what, a, `is too large: ${what} (${b}) must stay below 2^53 for exact arithmetic`, policy)
  }
}
