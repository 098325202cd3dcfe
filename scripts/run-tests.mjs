#!/usr/bin/env node
// Runs every test/**/*.test.ts with node's test runner (TypeScript through tsx).
// Node 20's --test does not expand globs, so the files are listed here.
import { spawnSync } from 'node:child_process'
import { readdirSync } from 'node:fs'
import { join, relative } from 'node:path'
import { ensureSystemPackages } from './system-packages.mjs'

const root = new URL('..', import.meta.url).pathname
const only = process.argv.slice(2)

function find(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) return find(path)
    return entry.name.endsWith('.test.ts') ? [path] : []
  })
}

const files = find(join(root, 'test'))
  .map((file) => relative(root, file))
  .filter((file) => only.length === 0 || only.some((filter) => file.includes(filter)))
  .sort()
if (files.length === 0) {
  console.error(`no test files match ${only.join(' ')}`)
  process.exit(1)
}
// A package that stays missing fails the suites that need it, saying so; the rest still run.
ensureSystemPackages()
const result = spawnSync(
  process.execPath,
  ['--import', 'tsx', '--test', '--test-reporter=spec', '--test-concurrency=2', ...files],
  { cwd: root, stdio: 'inherit' },
)
process.exit(result.status ?? 1)
