/**
 * Path patterns: the same answers as the regular expressions they were first
 * compiled to, and no path, however hostile, that makes matching hang.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { compileGlob, globRegex } from '../../src/http/glob.ts'
import { fcOptions } from '../helpers.ts'
import { nodeServer } from './servers.ts'

/** What a pattern means: the regular expression it reads as (`/**` zero or more segments, `**` anything, `*` anything but `/`). */
function reference(pattern: string, caseSensitive: boolean): (path: string) => boolean {
  const regex = globRegex(pattern, caseSensitive)
  return (path) => regex.test(path)
}

// Letters that fold unusually (Kelvin sign, long s, sharp s) and a lone surrogate pair's halves among the usual ones.
const patternChar = fc.constantFrom('/', '*', 'a', 'B', '.', '-', '\\', '(', '$', 'ß', 'K', 'k', '\u212A', 'ſ', 's', 'é', 'É', '\uD83D', '\uDE00')
const pathChar = fc.constantFrom('/', 'a', 'A', 'b', '.', '-', '\\', '(', '$', 'ß', 'K', 'k', '\u212A', 'ſ', 'S', 'é', 'É', '*', '\uD83D', '\uDE00', 'x')
const pattern = fc.array(patternChar, { maxLength: 12 }).map((chars) => `/${chars.join('')}`)

describe('path patterns', () => {
  it('match exactly the paths their regular expression matches, case-sensitive or not', () => {
    fc.assert(
      fc.property(pattern, fc.array(fc.array(pathChar, { maxLength: 14 }).map((chars) => `/${chars.join('')}`), { minLength: 1, maxLength: 6 }), fc.boolean(), (glob, paths, caseSensitive) => {
        const ours = compileGlob(glob, caseSensitive)
        const expected = reference(glob, caseSensitive)
        for (const path of paths) assert.equal(ours(path), expected(path), `${JSON.stringify(glob)} on ${JSON.stringify(path)}`)
      }),
      fcOptions(20_000),
    )
    // Paths made from the pattern itself, so that most of them match.
    fc.assert(
      fc.property(pattern, fc.array(fc.array(pathChar, { maxLength: 5 }).map((chars) => chars.join('')), { minLength: 4, maxLength: 4 }), fc.constantFrom('', '/', 'x'), fc.boolean(), (glob, fills, tail, caseSensitive) => {
        let next = 0
        const path = glob.replace(/\*+/g, () => fills[next++ % fills.length] as string) + tail
        assert.equal(compileGlob(glob, caseSensitive)(path), reference(glob, caseSensitive)(path), `${JSON.stringify(glob)} on ${JSON.stringify(path)}`)
      }),
      fcOptions(20_000),
    )
  })

  it('a path built to make a pattern of several wildcards backtrack is answered, and the server keeps answering', { timeout: 10_000 }, async () => {
    // As a regular expression, `/x/*-*-*` took minutes on this path: the server could answer nobody meanwhile.
    const server = await nodeServer({ rules: [{ name: 'dashes', match: { path: ['/x/*-*-*', '/files/*.*'] }, policies: { algorithm: 'sliding-log', limit: 1, windowMs: 60_000, name: 'dashes' } }] })
    try {
      const dashes = '-'.repeat(5_000)
      const [miss, hit, again, other] = await Promise.all([
        fetch(`${server.url}/x/${dashes}/z`),
        fetch(`${server.url}/x/${dashes}`),
        fetch(`${server.url}/x/a-${dashes}-b`),
        fetch(`${server.url}/files/${'.'.repeat(5_000)}/z`),
      ])
      assert.equal(miss.status, 200)
      assert.equal(miss.headers.get('ratelimit'), null, 'no rule matched a path below the pattern\'s segment')
      assert.deepEqual([hit.status, again.status].sort(), [200, 429], 'both matched the rule: one was let through, one refused')
      assert.equal(other.status, 200)
      assert.equal(other.headers.get('ratelimit'), null)
    } finally {
      await server.close()
    }
  })
})
