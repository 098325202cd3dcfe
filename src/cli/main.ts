#!/usr/bin/env node
/**
 * The `sluice` command. For now: `check` validates a policy, `demo` replays a
 * burst through every algorithm on a virtual clock. The gateway arrives later.
 */
import { readFileSync, realpathSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { SluiceError } from '../core/errors.ts'
import { resolvePolicies } from '../core/policy.ts'
import type { Policy } from '../core/types.ts'
import { Limiter } from '../limiter/limiter.ts'

const USAGE = `usage: sluice <command>

commands:
  check '<policy JSON>'   validate one policy or an array of them; print them resolved
  demo                    replay a burst through each algorithm on a virtual clock
  version                 print the version
  help                    print this text
`

export function main(argv: readonly string[], out: (line: string) => void = console.log): number {
  const [command, ...rest] = argv
  switch (command) {
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      out(USAGE)
      return 0
    case 'version':
    case '--version':
      out(version())
      return 0
    case 'check':
      return check(rest, out)
    case 'demo':
      demo(out)
      return 0
    default:
      out(`sluice: unknown command ${JSON.stringify(command)}\n\n${USAGE}`)
      return 2
  }
}

function check(args: readonly string[], out: (line: string) => void): number {
  if (args.length !== 1) {
    out(`sluice check: expected one argument, a policy as JSON\n\n${USAGE}`)
    return 2
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(args[0] as string)
  } catch (error) {
    out(`sluice check: not valid JSON: ${(error as Error).message}`)
    return 2
  }
  try {
    out(JSON.stringify(resolvePolicies(parsed), null, 2))
    return 0
  } catch (error) {
    if (error instanceof SluiceError) {
      out(`sluice check: ${error.message}`)
      return 1
    }
    throw error
  }
}

/** Twelve calls at 100 ms intervals, then four more after a pause, against each algorithm. */
function demo(out: (line: string) => void): void {
  const policies: Policy[] = [
    { algorithm: 'fixed-window', limit: 5, windowMs: 1000 },
    { algorithm: 'sliding-log', limit: 5, windowMs: 1000 },
    { algorithm: 'sliding-window', limit: 5, windowMs: 1000 },
    { algorithm: 'token-bucket', capacity: 5, refillTokens: 5, refillIntervalMs: 1000 },
    { algorithm: 'leaky-bucket', capacity: 5, leakTokens: 5, leakIntervalMs: 1000 },
    { algorithm: 'leaky-bucket', capacity: 5, leakTokens: 5, leakIntervalMs: 1000, mode: 'shape' },
  ]
  const times = [...Array.from({ length: 12 }, (_, i) => 500 + i * 100), 2400, 2410, 2420, 2430]
  out('Each row: one policy (5 per second); each column: a call at the time shown (ms).')
  out('  + allowed   . refused   ~ allowed after a wait\n')
  out(`${'policy'.padEnd(44)}${times.map((t) => String(t).padStart(5)).join('')}`)
  for (const policy of policies) {
    let now = 0
    const limiter = new Limiter({ policies: policy, clock: () => now })
    const marks = times.map((t) => {
      now = t
      const decision = limiter.limitSync('demo')
      return (decision.allowed ? (decision.waitMs > 0 ? '~' : '+') : '.').padStart(5)
    })
    out(`${(limiter.policies[0]?.name ?? '').padEnd(44)}${marks.join('')}`)
  }
}

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
  return pkg.version
}

/** True when this file is the program (also through npm's bin symlink), not an import. */
function invokedDirectly(): boolean {
  const script = process.argv[1]
  if (script === undefined) return false
  try {
    return realpathSync(script) === realpathSync(fileURLToPath(import.meta.url))
  } catch {
    return false
  }
}

if (invokedDirectly()) process.exitCode = main(process.argv.slice(2))
