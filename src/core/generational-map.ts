/**
 * A map bounded by two generations: when the newer one is half full the older
 * one is dropped whole. O(1) per operation and never more than `maxKeys`
 * entries; what it forgets is the least recently written half. Meant for
 * caches, where forgetting costs a round trip, not a wrong answer.
 */
export class GenerationalMap<V> {
  private current = new Map<string, V>()
  private previous = new Map<string, V>()

  constructor(private readonly maxKeys: number) {}

  get size(): number {
    return this.current.size + this.previous.size
  }

  get(key: string): V | undefined {
    return this.current.get(key) ?? this.previous.get(key)
  }

  set(key: string, value: V): void {
    this.previous.delete(key)
    if (!this.current.has(key) && this.current.size * 2 >= this.maxKeys) {
      this.previous = this.current
      this.current = new Map()
    }
    this.current.set(key, value)
  }

  delete(key: string): void {
    this.current.delete(key)
    this.previous.delete(key)
  }
}
