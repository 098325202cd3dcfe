/**
 * sluice/client: the calling side. A `fetch` (and an undici interceptor) that
 * reads the limits servers announce and waits instead of being refused.
 *
 * @example
 * import { createClient } from 'sluice/client'
 * const client = createClient()
 * const response = await client.fetch('https://api.example.com/items')
 */
export { createClient, retryDelayMs, RateLimitClient, type ClientOptions, type ClientEvents, type ClientRequestInit, type RequestLimitOptions, type RetryOptions, type WaitReason } from './client.ts'
export { readAnnouncement, retryAfterMs, type Announcement, type AnnouncedQuota, type HeaderLookup } from './headers.ts'
export { PartitionQuota, type Admission, type RequestCost } from './quota.ts'
export { QuotaExhaustedError, QueueFullError } from '../core/errors.ts'
