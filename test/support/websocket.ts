/** A WebSocket client for the tests (the `ws` package), telling an accepted upgrade from a refused one. */
import { WebSocket } from 'ws'

type Headers = Record<string, string | string[] | undefined>

/** Resolves the open socket with the 101's headers, or a refused upgrade's status, headers and body. */
export function openWebSocket(url: string, headers: Record<string, string> = {}): Promise<{ ws: WebSocket; headers: Headers } | { status: number; headers: Headers; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers })
    ws.once('upgrade', (response) => {
      ws.once('open', () => resolve({ ws, headers: response.headers }))
    })
    ws.once('unexpected-response', (_request, response) => {
      let body = ''
      response.setEncoding('utf8')
      response.on('data', (chunk: string) => { body += chunk })
      response.on('end', () => {
        resolve({ status: response.statusCode ?? 0, headers: response.headers, body })
        ws.terminate()
      })
    })
    ws.once('error', reject)
  })
}
