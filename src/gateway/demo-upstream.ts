/**
 * A small upstream for the demo (`npm start`) and the gateway's tests: it
 * answers, streams, echoes and stalls on request, so the gateway in front of it
 * has something real to proxy.
 *
 * GET  /                 a short text page
 * GET  /hello            JSON with the path and the X-Forwarded-* the upstream saw
 * GET  /moved?to=PATH     302 to PATH (default /hello) as an absolute URL built from Host, as frameworks write redirects
 * GET  /headers          the request headers, as JSON
 * GET  /bytes/N          N bytes (0x61 'a'...), streamed in 64 KiB chunks
 * POST /digest           the request body's length and SHA-256, streamed through
 * GET  /slow/MS          answers after MS milliseconds (at most 60 s)
 */
import { createHash } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'

const CHUNK = Buffer.alloc(64 * 1024, 0x61)

export function createDemoUpstream(): Server {
  return createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0] as string
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' })
      res.end(`${JSON.stringify(body)}\n`)
    }
    const bytes = /^\/bytes\/(\d{1,10})$/.exec(path)
    const slow = /^\/slow\/(\d{1,5})$/.exec(path)
    if (path === '/digest' && req.method === 'POST') {
      const hash = createHash('sha256')
      let length = 0
      req.on('data', (chunk: Buffer) => { hash.update(chunk); length += chunk.length })
      req.on('end', () => json(200, { length, sha256: hash.digest('hex') }))
      return
    }
    if (bytes !== null) {
      let left = Number(bytes[1])
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(left) })
      const write = () => {
        while (left > 0) {
          const chunk = left >= CHUNK.length ? CHUNK : CHUNK.subarray(0, left)
          left -= chunk.length
          if (!res.write(chunk)) return void res.once('drain', write)
        }
        res.end()
      }
      write()
      return
    }
    if (slow !== null) {
      const timer = setTimeout(() => json(200, { waitedMs: Number(slow[1]) }), Math.min(60_000, Number(slow[1])))
      res.once('close', () => clearTimeout(timer))
      return
    }
    if (path === '/headers') return json(200, req.headers)
    if (path === '/moved') {
      const to = new URLSearchParams((req.url ?? '').split('?')[1] ?? '').get('to') ?? '/hello'
      res.writeHead(302, { location: `http://${req.headers.host ?? 'localhost'}${to.startsWith('/') ? to : `/${to}`}` })
      res.end()
      return
    }
    if (path === '/hello' || path.startsWith('/hello/')) {
      return json(200, { hello: 'from the demo upstream', path, method: req.method, forwardedFor: req.headers['x-forwarded-for'], forwardedHost: req.headers['x-forwarded-host'], forwardedProto: req.headers['x-forwarded-proto'], forwardedPrefix: req.headers['x-forwarded-prefix'] })
    }
    if (path === '/' || path === '/login') {
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.end(`demo upstream: ${req.method} ${path}\n`)
      return
    }
    json(404, { error: 'not found', path })
  })
}

/** Starts the demo upstream on a loopback port (0: any free one); resolves its base URL. */
export function startDemoUpstream(port = 0, host = '127.0.0.1'): Promise<{ server: Server; url: string }> {
  const server = createDemoUpstream()
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => {
      const address = server.address() as AddressInfo
      resolve({ server, url: `http://${host.includes(':') ? `[${host}]` : host}:${address.port}` })
    })
  })
}
