#!/usr/bin/env node
// The Debian packages the test suite runs, installed when missing (DESIGN.md:
// `npm test` installs what a fresh machine lacks), by scripts/run-tests.mjs
// before the tests; `node scripts/system-packages.mjs` alone exits 1 while any
// is missing. SLUICE_NO_INSTALL=1 only reports.
//   redis-server       the Redis suites start their own servers on loopback ports
//   prometheus         promtool checks the gateway's alert rules (a structural check otherwise)
//   openssl            the gateway's HTTPS test makes its certificate
//   fonts-dejavu-core  the simulator's chart test rasterises its SVG, labels included
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { pathToFileURL } from 'node:url'

const onPath = (command) => spawnSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' }).status === 0

const NEEDED = [
  { pkg: 'redis-server', present: () => onPath('redis-server') },
  { pkg: 'prometheus', present: () => onPath('promtool') },
  { pkg: 'openssl', present: () => onPath('openssl') },
  { pkg: 'fonts-dejavu-core', present: () => existsSync('/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf') },
]

/** Installs the missing packages with apt-get; returns the ones still missing. */
export function ensureSystemPackages() {
  const missing = NEEDED.filter((need) => !need.present()).map((need) => need.pkg)
  if (missing.length === 0) return []
  const install = (quiet) => `apt-get install -y ${quiet}--no-install-recommends ${missing.join(' ')}`
  const command = install('')
  const root = process.getuid?.() === 0
  const sudo = !root && onPath('sudo') && spawnSync('sudo', ['-n', 'true'], { stdio: 'ignore' }).status === 0
  if (process.env.SLUICE_NO_INSTALL === '1' || !onPath('apt-get') || (!root && !sudo)) {
    console.error(`sluice tests: missing ${missing.join(', ')}; install with: sudo ${command}`)
    return missing
  }
  console.error(`sluice tests: installing ${missing.join(', ')} (Debian packages the suite runs)`)
  const prefix = root ? '' : 'sudo '
  const run = spawnSync('sh', ['-c', `${prefix}apt-get update -qq && DEBIAN_FRONTEND=noninteractive ${prefix}${install('-qq ')} >/dev/null`], { stdio: 'inherit' })
  if (run.status !== 0) console.error(`sluice tests: apt-get failed (exit ${run.status}); install by hand: sudo ${command}`)
  return NEEDED.filter((need) => !need.present()).map((need) => need.pkg)
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  process.exit(ensureSystemPackages().length === 0 ? 0 : 1)
}
