// The README's code as a new user copies it: every TypeScript block compiles against the built
// package's types, and the gateway config it shows is one the gateway accepts.
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'

const root = new URL('../..', import.meta.url).pathname
const readme = readFileSync(join(root, 'README.md'), 'utf8')

/** Each ```ts block, with what its `<!-- typecheck: ... -->` line (just above it) says the reader already has. */
function typescriptBlocks(): Array<{ line: number; context: string; code: string }> {
  const blocks = []
  for (const found of readme.matchAll(/(?:<!-- typecheck: (.*) -->\n)?```ts\n([\s\S]*?)```/g)) {
    const line = readme.slice(0, found.index).split('\n').length
    blocks.push({ line, context: found[1] ?? '', code: found[2] ?? '' })
  }
  return blocks
}

/** A project beside node_modules in which `sluice` resolves to this repository, as it does once installed. */
function project(): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-readme-'))
  mkdirSync(join(dir, 'node_modules'))
  for (const entry of readdirSync(join(root, 'node_modules'))) {
    if (entry !== '.bin' && entry !== 'sluice') symlinkSync(join(root, 'node_modules', entry), join(dir, 'node_modules', entry))
  }
  symlinkSync(root, join(dir, 'node_modules', 'sluice'))
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module' }))
  return dir
}

describe('README', () => {
  it('every TypeScript block compiles, strict, against the built package (its typecheck line giving what the text around it defines)', () => {
    const blocks = typescriptBlocks()
    assert.ok(blocks.length >= 10, `found ${blocks.length} TypeScript blocks in README.md`)
    const dir = project()
    try {
      const files = blocks.map((block, i) => {
        const file = `block-${i + 1}-line-${block.line}.ts`
        // Each block a module of its own: top-level await works, and names do not clash across blocks.
        writeFileSync(join(dir, file), `${block.context}\n${block.code}\nexport {}\n`)
        return file
      })
      writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({
        compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', lib: ['ES2023', 'DOM'], types: ['node'], strict: true, skipLibCheck: true, noEmit: true },
        files,
      }))
      const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc')
      try {
        execFileSync(process.execPath, [tsc, '-p', dir], { cwd: dir, encoding: 'utf8' })
      } catch (error) {
        assert.fail(`README code does not compile (block-N-line-L: the block at README.md line L):\n${(error as { stdout: string }).stdout}`)
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('the gateway config it shows passes check-config, once the file it names exists', () => {
    const yaml = /```yaml\n([\s\S]*?)```/.exec(readme)?.[1]
    assert.ok(yaml !== undefined && yaml.includes('routes:'), 'README.md shows a gateway config')
    const dir = mkdtempSync(join(tmpdir(), 'sluice-readme-yaml-'))
    try {
      writeFileSync(join(dir, 'api-keys'), 'k-1\n')
      const config = yaml.replaceAll('/etc/sluice/api-keys', join(dir, 'api-keys'))
      assert.notEqual(config, yaml, 'the config names /etc/sluice/api-keys, which this test stands in for')
      writeFileSync(join(dir, 'sluice.yaml'), config)
      const cli = join(root, 'dist', 'cli', 'main.js')
      const output = execFileSync(process.execPath, [cli, 'check-config', join(dir, 'sluice.yaml')], { encoding: 'utf8', env: { ...process.env, REDIS_URL: 'redis://127.0.0.1:6379' } })
      assert.match(output, /: valid \(version /)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
