import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { clientLocation, pathRewriter } from '../../src/gateway/proxy.ts'

describe('a route\'s path rewriting', () => {
  it('strips a prefix only where a whole segment matches it, then applies the rewrite', () => {
    const rewrite = pathRewriter({ stripPrefix: '/api', rewrite: { pattern: '^/v1/(.*)$', replacement: '/internal/$1' } })
    assert.deepEqual(['/api', '/api/', '/api/users', '/api/v1/users/7', '/apiary', '/other/api/x', '/API/users'].map(rewrite),
      ['/', '/', '/users', '/internal/users/7', '/apiary', '/other/api/x', '/API/users'])
    assert.equal(pathRewriter({ stripPrefix: '/' })('/a/b'), '/a/b')
    // A replacement that drops the leading slash still sends a path.
    assert.equal(pathRewriter({ rewrite: { pattern: '^/old/', replacement: 'new/' } })('/old/x'), '/new/x')
  })

  it('without case when the routes match without case: /API/v1/x took the route, and loses its prefix and is rewritten too', () => {
    const rewrite = pathRewriter({ stripPrefix: '/api', rewrite: { pattern: '^/v1/(.*)$', replacement: '/internal/$1' } }, false)
    assert.deepEqual(['/API/users', '/Api/V1/Users/7', '/apiary', '/api'].map(rewrite), ['/users', '/internal/Users/7', '/apiary', '/'])
  })

  it('tells the prefix it stripped, as the client wrote it, and whether upstream paths map back to the client\'s', () => {
    const strip = pathRewriter({ stripPrefix: '/api' }, false)
    assert.deepEqual(['/api/users', '/API/users', '/api', '/apiary', '/other'].map((path) => strip.strippedPrefix(path)), ['/api', '/API', '/api', undefined, undefined])
    assert.equal(strip.mapsBack, true)
    assert.equal(pathRewriter({}).strippedPrefix('/api/users'), undefined)
    assert.equal(pathRewriter({ stripPrefix: '/' }).strippedPrefix('/api/users'), undefined)
    // A regex rewrite has no inverse: the upstream's paths cannot be told back as the client's.
    assert.equal(pathRewriter({ stripPrefix: '/api', rewrite: { pattern: '^/v1/', replacement: '/internal/' } }).mapsBack, false)
  })

  it('gives a Location naming the upstream back as the client\'s path (nginx\'s proxy_redirect default), and leaves any other', () => {
    const base = { origin: 'http://10.0.0.5:8081', path: '' }
    const map = (location: string, prefix?: string, at = base) => clientLocation(location, at, prefix)
    assert.deepEqual([
      map('http://10.0.0.5:8081/login?next=%2F', '/api'),
      map('HTTP://10.0.0.5:8081/x', '/api'),
      map('http://10.0.0.5:8081', '/api'),
      map('http://10.0.0.5:8081?x=1', '/api'),
      map('http://10.0.0.5:8081/x'),
    ], ['/api/login?next=%2F', '/api/x', '/api/', '/api/?x=1', '/x'])
    // Another host, another port, a longer host, a path-absolute or a relative Location: not the upstream's own URL.
    for (const other of ['http://10.0.0.5:80810/x', 'http://10.0.0.50:8081/x', 'https://10.0.0.5:8081/x', 'http://example.com/x', '/x', 'x', '']) {
      assert.equal(map(other, '/api'), other, other)
    }
    // An upstream URL with a path: only Locations under it map back.
    const under = { origin: 'http://10.0.0.5:8081', path: '/v2' }
    assert.deepEqual([map('http://10.0.0.5:8081/v2/x', '/api', under), map('http://10.0.0.5:8081/v2', '/api', under), map('http://10.0.0.5:8081/v20/x', '/api', under), map('http://10.0.0.5:8081/x', '/api', under)],
      ['/api/x', '/api/', 'http://10.0.0.5:8081/v20/x', 'http://10.0.0.5:8081/x'])
  })
})
