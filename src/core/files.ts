import { closeSync, fstatSync, openSync, readFileSync, readSync } from 'node:fs'

/** The file is larger than the caller reads: most likely the wrong one. */
export class FileTooLargeError extends Error {
  constructor(maxBytes: number) {
    super(`larger than ${maxBytes / 1024 / 1024} MiB: is it the right file?`)
    this.name = 'FileTooLargeError'
  }
}

/**
 * A file, read whole unless it is larger than `maxBytes`: a wrong path (a
 * log, a disk image, /dev/zero, which never ends) is refused with a reason
 * rather than read into memory, or read forever.
 */
export function readFileBounded(path: string, maxBytes: number): Buffer {
  const fd = openSync(path, 'r')
  try {
    const stat = fstatSync(fd)
    if (stat.size > maxBytes) throw new FileTooLargeError(maxBytes)
    if (stat.isFile()) return readFileSync(fd)
    // Devices and pipes tell no size: read until the end, or until past the bound.
    const chunk = Buffer.alloc(65_536)
    const chunks: Buffer[] = []
    let length = 0
    for (let read = readSync(fd, chunk); read > 0; read = readSync(fd, chunk)) {
      length += read
      if (length > maxBytes) throw new FileTooLargeError(maxBytes)
      chunks.push(Buffer.from(chunk.subarray(0, read)))
    }
    return Buffer.concat(chunks, length)
  } finally {
    closeSync(fd)
  }
}
