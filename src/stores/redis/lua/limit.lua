-- sluice: calls against the policies of limiters, each decided and written
-- atomically (all-or-nothing across its policies). Mirrors src/algorithms/*.ts
-- line for line: every quantity is an integer held in a double, every division
-- is floored or ceiled explicitly, so this script and the TypeScript agree bit
-- for bit.
--
-- One invocation decides a batch of calls, in order, exactly as if each had
-- been its own invocation: a lone call is a batch of one. Batching amortises
-- the per-invocation cost that otherwise caps decisions per second; each set
-- of policies is sent and parsed once per batch, and consecutive calls alike
-- in everything but their key (the usual case) share one run descriptor, so a
-- call costs Redis one key argument and three reply integers per policy.
--
-- ARGV[1]  s, the number of policy sets; then per set: n, and per policy the
--          algorithm, four parameters and blockMs ('' for none) (6 n values)
-- then per run of consecutive calls, 5 values: now in epoch ms ('' = the
--          server clock, TIME, read once), cost (0 = peek: decide for cost 1,
--          change nothing; negative: give that many units back, buckets only),
--          maxWaitMs, the index of the policy set (1-based), and the number
--          of calls in the run
-- KEYS     per call, one key per policy of its set, in order:
--          prefix:{key}:policyName (one hash tag: one slot); then, for each
--          policy with blockMs, in order, its block: prefix:{key}:policyName{block}
--          ('B' and the epoch ms it ends at)
--
-- Returns per call, per policy: remaining, resetAfterMs, the verdict (waitMs
-- (>= 0) when allowed, -1 - retryAfterMs when refused), moreAfterMs. Integers only
-- (RESP2 and RESP3 alike; a Lua boolean would come back differently on each),
-- but for those within 64 of 2^53, sent as their digits (see exact below).
-- The limit is not sent back: the caller knows its policies.
--
-- When "now" comes from the client, expiries get CLIENT_TIME_SLACK ms more:
-- Redis expires keys on its own clock, and state must not vanish before the
-- client's time says it stops mattering (a later expiry never changes a
-- decision of the policy that wrote the state: past its TTL, it decides
-- exactly as a missing key; one whose numbers a config changed may still
-- count it, where the memory store has forgotten it).

-- Redis 3.2 to 4.x need this before a write that follows TIME; a no-op on 5+.
pcall(redis.replicate_commands)

local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local format, match, tonumber = string.format, string.match, tonumber

-- Integers up to 2^53 written exactly. '%d' takes half the time of '%.0f'
-- where Lua's integer format is 64 bits wide (every 64-bit Redis build);
-- elsewhere '%.0f'. (tostring and concatenation keep only 14 digits; a number
-- passed to redis.call is written with '%.17g', slower still.)
local INT = (format('%d', 2 ^ 53) == '9007199254740992') and '%d' or '%.0f'
local PAIR = INT .. ':' .. INT

local function int(x)
  return format(INT, x)
end

-- A two-field value, 'a:b', in one format call.
local function pair(a, b)
  return format(PAIR, a, b)
end

-- A decision is an array (Lua builds one in half the time of a record):
local ALLOWED, REMAINING, RESET_AFTER, RETRY_AFTER, WAIT, MORE_AFTER = 1, 2, 3, 4, 5, 6
-- The limit is not kept (the caller knows its policies); it stays a parameter
-- so that each algorithm below reads as its TypeScript twin.
local function decision(allowed, limit, remaining, reset_after, more_after, retry_after, wait)
  return { allowed, remaining, reset_after, retry_after, wait, more_after }
end

-- Each algorithm: (key, state string or false, now, cost, p1..p4, max_wait, peek)
-- -> decision, new state (string; a commit function for sliding-log), ttl ms.
-- Buckets and the sliding log also have a refund (see decide).
--
-- A string state starts with its algorithm's letter, and each algorithm reads
-- only its own: a policy name that a new config gives another algorithm, or a
-- value written from outside sluice, then decides as a fresh key (the first
-- charged call overwrites it) rather than as numbers that meant something else.
--
-- define(name, ...) defines one algorithm's functions and returns them, and a
-- call defines only the algorithms its policies use: by EVALSHA the whole
-- script runs on every call. What costs is creating closures, the more so
-- with upvalues (Lua 5.1 looks each one up among the open ones), so define is
-- one function for the five, handed what it shares rather than closing over it.
local function define(name, decision, int, pair, INT)
  local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
  local format, match, tonumber = string.format, string.match, tonumber

  ---------------------------------------------------------------- fixed window
  if name == 'fixed-window' then
    local FIXED = 'F' .. INT .. ':' .. INT

    local function fixed_window(key, raw, now, cost, limit, window_ms, _, _, max_wait)
      local current = floor(now / window_ms)
      local window, used = current, 0
      -- The stored window's start in epoch ms (the TypeScript state's window x
      -- windowMs: under a changed windowMs it still means the same moment), read
      -- onto this policy's grid.
      local start, u = match(raw or '', '^F(-?%d+):(-?%d+)$')
      if start then
        local stored = floor(tonumber(start) / window_ms)
        if stored >= current then window, used = stored, tonumber(u) end
      end
      local fits = used + cost <= limit
      local target = fits and window or window + 1
      local used_after = fits and used + cost or cost
      local needed_wait = max(0, target * window_ms - now)
      if needed_wait <= max_wait then
        local reset_after = (target + 1) * window_ms - now
        local remaining = (target == current) and (limit - used_after) or 0
        return decision(1, limit, remaining, reset_after, reset_after, 0, needed_wait),
          format(FIXED, target * window_ms, used_after), reset_after
      end
      local reset_after = (window + 1) * window_ms - now
      local remaining = (window == current) and max(0, limit - used) or 0
      return decision(0, limit, remaining, reset_after, reset_after, needed_wait - max_wait, 0), nil, reset_after
    end

    return fixed_window
  end

  ----------------------------------------------------------------- sliding log
  if name == 'sliding-log' then
    -- The log is a sorted set with one member per millisecond in which calls were
    -- allowed, scored by that time: calls of one millisecond share an entry, as
    -- in the TypeScript log. A member is named 'total:cost': the entry's summed
    -- cost, and the running total of the costs logged up to and including it.
    -- The live entries' summed cost is then two reads, not a walk of the log:
    -- the newest total, less the oldest total, plus the oldest cost. Totals only
    -- grow while the key lives; near 2^53 they are restarted from the oldest
    -- live entry (one rewrite of the log, once in 2^53 units of cost).
    local MAX_TOTAL = 2 ^ 53

    local function log_entry(member)
      local total, cost = match(member, '^(%d+):(%d+)$')
      return tonumber(total), tonumber(cost)
    end

    -- Rewrites the log with totals counted from 0: the same times, costs and
    -- expiry. It reads either layout, so it serves two ends: restarting totals
    -- that near 2^53 (once a commit has trimmed what left the window), and a log
    -- that sluice wrote before this layout, one member per call named
    -- 'cost:batch:call' (or one that old and new instances wrote together, in a
    -- rolling upgrade), which it turns into entries.
    local function rewrite_log(key)
      local ttl = redis.call('PTTL', key)
      local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
      redis.call('DEL', key)
      local total, time, cost = 0, nil, 0
      for i = 1, #entries, 2 do
        local _, c = log_entry(entries[i])
        c = c or tonumber(match(entries[i], '^(%d+):')) or 0
        if time ~= nil and entries[i + 1] ~= time then
          redis.call('ZADD', key, time, pair(total, cost))
          cost = 0
        end
        time, cost, total = entries[i + 1], cost + c, total + c
      end
      if time ~= nil then redis.call('ZADD', key, time, pair(total, cost)) end
      if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
    end

    -- Milliseconds until the oldest live entries holding `units` have left: the
    -- first entry whose total reaches base + units (a search by rank), else the
    -- newest. The other arguments are the log as sliding_log read it.
    local function until_freed(key, units, base, oldest_total, oldest_time, newest_total, last_time, stale, cutoff, window_ms, now)
      local target = base + units
      if oldest_total >= target then return oldest_time + window_ms - now end
      if newest_total >= target then
        -- Totals ascend with rank: rank lo's is below the target, rank hi's reaches it.
        local lo = stale and redis.call('ZCOUNT', key, '-inf', int(cutoff)) or 0
        local hi = redis.call('ZCARD', key) - 1
        while hi - lo > 1 do
          local mid = floor((lo + hi) / 2)
          local total = log_entry(redis.call('ZRANGE', key, mid, mid)[1])
          if total >= target then hi = mid else lo = mid end
        end
        return tonumber(redis.call('ZRANGE', key, hi, hi, 'WITHSCORES')[2]) + window_ms - now
      end
      return last_time + window_ms - now
    end

    -- The oldest entry still in the window, past `stale` ones at or before the cutoff.
    local function first_live(key, cutoff, stale)
      if stale then return redis.call('ZRANGEBYSCORE', key, '(' .. int(cutoff), '+inf', 'WITHSCORES', 'LIMIT', 0, 1) end
      return redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    end

    local function sliding_log(key, _, now, cost, limit, window_ms, _, _, _, peek)
      local cutoff = now - window_ms
      local used, base, last_time = 0, 0, now
      local newest, newest_total, newest_cost, oldest_time, oldest_total
      -- Entries that have left the window are trimmed when a call is allowed, as the
      -- memory log is, and never on a refusal or a peek: a clock that steps back
      -- afterwards finds them still counted, and no window reopens.
      local head = redis.pcall('ZRANGE', key, 0, 0, 'WITHSCORES')
      -- Not a sorted set: another algorithm's state, read as none and replaced by the first charged call.
      local foreign = head.err ~= nil
      if foreign then head = {} end
      local stale = head[1] ~= nil and tonumber(head[2]) <= cutoff
      if stale then head = first_live(key, cutoff, true) end
      if head[1] then
        local tail = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
        local oldest_cost
        newest_total, newest_cost = log_entry(tail[1])
        oldest_total, oldest_cost = log_entry(head[1])
        if not (newest_total and oldest_total) then
          rewrite_log(key)
          tail = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
          head = first_live(key, cutoff, stale)
          newest_total, newest_cost = log_entry(tail[1])
          oldest_total, oldest_cost = log_entry(head[1])
        end
        newest = tail[1]
        last_time = tonumber(tail[2])
        oldest_time = tonumber(head[2])
        base = oldest_total - oldest_cost
        used = newest_total - base
      end

      local remaining = max(0, limit - used)

      if cost == 0 then
        -- A peek, or a policy shown uncharged: the log as it stands, replenished when its newest entry leaves.
        local reset_after = (used > 0) and (last_time + window_ms - now) or 0
        local more_after = (remaining == 0) and until_freed(key, used + 1 - limit, base, oldest_total, oldest_time, newest_total, last_time, stale, cutoff, window_ms, now) or reset_after
        return decision(1, limit, remaining, reset_after, more_after, 0, 0), nil, reset_after
      end

      if used + cost <= limit then
        -- Never an entry earlier than the newest: a clock stepping back must not reorder the log.
        local time = max(now, last_time)
        local reset_after = time + window_ms - now
        local commit = nil
        if not peek then
          commit = function(ttl)
            if foreign then redis.call('DEL', key) end
            if stale then redis.call('ZREMRANGEBYSCORE', key, '-inf', int(cutoff)) end
            if newest and newest_total + cost >= MAX_TOTAL then
              rewrite_log(key)
              newest = pair(newest_total - base, newest_cost)
              newest_total = newest_total - base
            end
            if newest and time == last_time then
              -- The newest entry's millisecond: that entry takes this cost too.
              redis.call('ZREM', key, newest)
              redis.call('ZADD', key, int(time), pair(newest_total + cost, newest_cost + cost))
            else
              redis.call('ZADD', key, int(time), pair((newest_total or 0) + cost, cost))
            end
            redis.call('PEXPIRE', key, int(ttl))
          end
        end
        -- With none left, one is back when the oldest entry leaves: this call's, in an empty log.
        local more_after = reset_after
        if used + cost == limit and used > 0 then more_after = oldest_time + window_ms - now end
        return decision(1, limit, limit - used - cost, reset_after, more_after, 0, 0), commit, reset_after
      end

      -- The call fits once the oldest entries holding `excess` units have left (a refused call found some live).
      local reset_after = last_time + window_ms - now
      local more_after = (remaining == 0) and until_freed(key, used + 1 - limit, base, oldest_total, oldest_time, newest_total, last_time, stale, cutoff, window_ms, now) or reset_after
      local retry_after = until_freed(key, used + cost - limit, base, oldest_total, oldest_time, newest_total, last_time, stale, cutoff, window_ms, now)
      return decision(0, limit, remaining, reset_after, more_after, retry_after, 0), nil, reset_after
    end

    -- Mirrors slidingLogRefund: `units` taken from the oldest entries still in the
    -- window. An entry keeps its running total, so the count below the oldest (the
    -- base) rises by what it gives back. Entries already out of the window stay
    -- until a charged call trims them.
    local function sliding_log_refund(key, now, units, window_ms)
      if redis.call('TYPE', key).ok ~= 'zset' then return end
      local after = '(' .. int(now - window_ms)
      local left = units
      while left > 0 do
        local oldest = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
        if oldest[1] == nil then return end
        local total, cost = log_entry(oldest[1])
        if not total then
          rewrite_log(key)
        elseif cost > left then
          -- The new member first: removing the last one first would drop the key and its expiry.
          redis.call('ZADD', key, oldest[2], pair(total, cost - left))
          redis.call('ZREM', key, oldest[1])
          left = 0
        else
          redis.call('ZREM', key, oldest[1])
          left = left - cost
        end
      end
    end

    return sliding_log, sliding_log_refund
  end

  -------------------------------------------------------------- sliding window
  if name == 'sliding-window' then
    local WINDOW = 'W' .. INT .. ':' .. INT .. ':' .. INT

    local function sliding_window_retry(previous, current, cost, limit, window_ms, elapsed)
      local spare = limit - current - cost
      if spare >= 0 and previous > 0 then
        local span = floor((spare * window_ms) / previous)
        if span > 0 then return window_ms - span - elapsed end
      end
      local until_next = window_ms - elapsed
      if current <= limit - cost then return until_next end
      local span = floor(((limit - cost) * window_ms) / current)
      return until_next + window_ms - span
    end

    local function sliding_window(key, raw, now, cost, limit, window_ms)
      local window = floor(now / window_ms)
      local elapsed = now - window * window_ms
      local previous, current = 0, 0
      -- As the fixed window: the stored window's start in epoch ms, read onto this policy's grid.
      local start, p, c = match(raw or '', '^W(-?%d+):(-?%d+):(-?%d+)$')
      if start then
        local stored = floor(tonumber(start) / window_ms)
        p, c = tonumber(p), tonumber(c)
        if stored > window then
          window = stored
          elapsed = 0
        end
        if stored == window then
          previous, current = p, c
        elseif stored == window - 1 then
          previous = c
        end
      end

      local weighted = previous * (window_ms - elapsed)
      local room = (limit - current - cost) * window_ms - weighted
      local lag = window * window_ms + elapsed - now
      if room >= 0 then
        local reset_after = (window + 2) * window_ms - now
        local remaining = floor(room / window_ms)
        local more_after = reset_after
        if remaining == 0 then more_after = lag + sliding_window_retry(previous, current + cost, 1, limit, window_ms, elapsed) end
        return decision(1, limit, remaining, reset_after, more_after, 0, 0),
          format(WINDOW, window * window_ms, previous, current + cost), reset_after
      end

      local retry_after = lag + sliding_window_retry(previous, current, cost, limit, window_ms, elapsed)
      local reset_after
      if current > 0 then
        reset_after = (window + 2) * window_ms - now
      elseif previous > 0 then
        reset_after = (window + 1) * window_ms - now
      else
        reset_after = 0
      end
      local remaining = max(0, floor(((limit - current) * window_ms - weighted) / window_ms))
      local more_after = reset_after
      if remaining == 0 then more_after = lag + sliding_window_retry(previous, current, 1, limit, window_ms, elapsed) end
      return decision(0, limit, remaining, reset_after, more_after, retry_after, 0), nil, reset_after
    end

    return sliding_window
  end

  ---------------------------------------------------------------- token bucket
  if name == 'token-bucket' then
    -- The state ends with the refill interval its level is scaled by.
    local BUCKET = 'T' .. INT .. ':' .. INT .. ':' .. INT

    local function ms_until(deficit, now, updated_at, refill, refill_tokens, refill_interval)
      if refill == 'greedy' then return ceil(deficit / refill_tokens) end
      local intervals = ceil(deficit / (refill_tokens * refill_interval))
      return updated_at + intervals * refill_interval - now
    end

    -- The level brought up to `now` by refill (never above full), and when it was.
    local function token_bucket_refill(raw, now, capacity, refill_tokens, refill_interval, refill)
      local full = capacity * refill_interval
      local l, u, i = match(raw or '', '^T(-?%d+):(-?%d+):(%d+)$')
      l, u, i = tonumber(l), tonumber(u), tonumber(i)
      if not l then return full, now end
      -- Scaled by another refillIntervalMs (a config changed it): the same tokens, within a full bucket either way.
      if i ~= refill_interval then l = min(full, max(-full, floor(l * refill_interval / i))) end
      local elapsed = max(0, now - u)
      if refill == 'greedy' then
        return min(full, l + elapsed * refill_tokens), max(now, u)
      end
      local intervals = floor(elapsed / refill_interval)
      local level = min(full, l + intervals * refill_tokens * refill_interval)
      if level == full then return level, now end
      return level, u + intervals * refill_interval
    end

    local function token_bucket(key, raw, now, cost, capacity, refill_tokens, refill_interval, refill, max_wait)
      local full = capacity * refill_interval
      local level, updated_at = token_bucket_refill(raw, now, capacity, refill_tokens, refill_interval, refill)

      local need = cost * refill_interval
      local needed_wait = 0
      if level < need then needed_wait = ms_until(need - level, now, updated_at, refill, refill_tokens, refill_interval) end
      local allowed = needed_wait <= max_wait
      local after = allowed and (level - need) or level
      local reset_after = 0
      if after < full then reset_after = ms_until(full - after, now, updated_at, refill, refill_tokens, refill_interval) end
      local remaining = max(0, floor(after / refill_interval))
      -- Until a token more than those left: the next one, or the first after a debt is repaid.
      local more_after = 0
      if after < full then more_after = ms_until((remaining + 1) * refill_interval - after, now, updated_at, refill, refill_tokens, refill_interval) end
      if allowed then
        return decision(1, capacity, remaining, reset_after, more_after, 0, needed_wait), format(BUCKET, after, updated_at, refill_interval), reset_after
      end
      return decision(0, capacity, remaining, reset_after, more_after, needed_wait - max_wait, 0), nil, reset_after
    end

    -- Mirrors tokenBucketRefund: the state after giving back `units` that
    -- were taken and not spent; false when there is no state.
    local function token_bucket_refund(raw, now, units, capacity, refill_tokens, refill_interval, refill)
      if not match(raw or '', '^T(-?%d+):(-?%d+):(%d+)$') then return false end
      local level, updated_at = token_bucket_refill(raw, now, capacity, refill_tokens, refill_interval, refill)
      return format(BUCKET, min(capacity * refill_interval, level + units * refill_interval), updated_at, refill_interval)
    end

    return token_bucket, token_bucket_refund
  end

  ---------------------------------------------------------- leaky bucket (GCRA)
  if name == 'leaky-bucket' then
    local GCRA = 'L' .. INT .. ':' .. INT

    local function leaky_bucket(key, raw, now, cost, capacity, leak_tokens, leak_interval, mode, max_wait)
      local queued = 0
      local t, r = match(raw or '', '^L(-?%d+):(-?%d+)$')
      if t then queued = max(0, (tonumber(t) - now) * leak_tokens + tonumber(r)) end
      local tolerance = capacity * leak_interval
      local queued_after = queued + cost * leak_interval
      local overflow = 0
      if queued_after > tolerance then overflow = ceil((queued_after - tolerance) / leak_tokens) end

      local needed_wait, retry_after
      if mode == 'police' then
        needed_wait = overflow
        retry_after = max(0, overflow - max_wait)
      else
        needed_wait = ceil(queued / leak_tokens)
        local too_long = 0
        if max_wait > 0 then too_long = max(0, needed_wait - max_wait) end
        retry_after = max(overflow, too_long)
      end
      local allowed = retry_after == 0
      local held = allowed and queued_after or queued
      local reset_after = ceil(held / leak_tokens)
      local remaining = max(0, floor((tolerance - held) / leak_interval))
      -- Until room for one more than those left has leaked free.
      local more_after = 0
      if held > 0 then more_after = ceil((held - (capacity - remaining - 1) * leak_interval) / leak_tokens) end
      if allowed then
        local offset = floor(held / leak_tokens)
        return decision(1, capacity, remaining, reset_after, more_after, 0, needed_wait),
          format(GCRA, now + offset, held - offset * leak_tokens), reset_after
      end
      return decision(0, capacity, remaining, reset_after, more_after, retry_after, 0), nil, reset_after
    end

    -- Mirrors leakyBucketRefund, as token_bucket_refund does its twin.
    local function leaky_bucket_refund(raw, now, units, capacity, leak_tokens, leak_interval)
      local t, r = match(raw or '', '^L(-?%d+):(-?%d+)$')
      if not t then return false end
      local queued = max(0, (tonumber(t) - now) * leak_tokens + tonumber(r) - units * leak_interval)
      local offset = floor(queued / leak_tokens)
      return format(GCRA, now + offset, queued - offset * leak_tokens)
    end

    return leaky_bucket, leaky_bucket_refund
  end

  error('sluice: unknown algorithm ' .. tostring(name))
end

-------------------------------------------------------------------- composite
-- The algorithms defined so far, by name, and their refunds. As a Redis
-- function they stay defined from one call to the next.
local ALGORITHM, REFUND = {}, {}
local function algorithm(name)
  if not ALGORITHM[name] then ALGORITHM[name], REFUND[name] = define(name, decision, int, pair, INT) end
  return ALGORITHM[name], REFUND[name]
end

local CLIENT_TIME_SLACK = 60000

local server_now = nil
local function now_of(arg)
  if arg ~= '' then return tonumber(arg), CLIENT_TIME_SLACK end
  if not server_now then
    local ok, time = pcall(redis.call, 'TIME')
    if not ok then return nil end
    server_now = tonumber(time[1]) * 1000 + floor(tonumber(time[2]) / 1000)
  end
  return server_now, 0
end

-- The reply, filled through a running count (# would search the array on every push).
local reply, size = {}, 0

-- ioredis 6 and node-redis 6 decode half the integer replies within 47 of 2^53
-- off by one (their digit loop passes 2^53 on its way: ioredis PR #2164), so a
-- limit of Number.MAX_SAFE_INTEGER would read back remaining > limit. A number
-- that large goes as a string, which the caller parses exactly.
local EXACT_REPLY = 2 ^ 53 - 64
local function exact(x)
  if x < EXACT_REPLY and x > -EXACT_REPLY then return x end
  return int(x)
end

local function push(d)
  reply[size + 1] = exact(d[REMAINING])
  reply[size + 2] = exact(d[RESET_AFTER])
  reply[size + 3] = exact((d[ALLOWED] == 1) and d[WAIT] or -1 - d[RETRY_AFTER])
  reply[size + 4] = exact(d[MORE_AFTER])
  size = size + 4
end

-- A string key's value, false for a missing key or one of another type (a
-- sliding log's sorted set, when a new config gave its policy name another algorithm).
local function string_at(key)
  local raw = redis.pcall('GET', key)
  return type(raw) == 'string' and raw
end

-- Policy i of a call whose keys start after KEYS[k0].
local function run(set, k0, i, now, c, wait, peek)
  local policy = set[i]
  local key = KEYS[k0 + i]
  local raw = false
  if policy[2] ~= 'sliding-log' then raw = string_at(key) end
  return policy[1](key, raw, now, c, policy[3], policy[4], policy[5], policy[6], wait, peek)
end

local function uncharged(set, k0, i, now)
  local d = run(set, k0, i, now, 0, 0, true)
  d[WAIT] = 0
  return d
end

------------------------------------------------------------------------ blocks
-- Mirrors the blocks of src/algorithms/index.ts: a policy with blockMs that
-- refuses a charged call blocks the key for blockMs (written although nothing
-- is charged), and refuses every call until then without deciding.

-- When policy i's block of this key ends (epoch ms); 0 when it has none.
local function blocked_until(set, k0, i)
  local slot = set[i][8]
  if not slot then return 0 end
  local until_ms = match(string_at(KEYS[k0 + slot]) or '', '^B(%d+)$')
  return tonumber(until_ms) or 0
end

-- A decision of a policy that blocks the key for `left` ms more: nothing left until then.
local function blocked_view(d, left)
  d[ALLOWED] = 0
  d[REMAINING] = 0
  d[RESET_AFTER] = max(d[RESET_AFTER], left)
  d[MORE_AFTER] = max(d[MORE_AFTER], left)
  d[RETRY_AFTER] = max(d[RETRY_AFTER], left)
  d[WAIT] = 0
  return d
end

-- A blocked policy's decision: its state as it stands, refusing until the block ends.
local function blocked_decision(set, k0, i, now, until_ms)
  local d = uncharged(set, k0, i, now)
  d[RETRY_AFTER] = 0
  return blocked_view(d, until_ms - now)
end

-- Policy i refused a charged call: it blocks the key from now.
local function block(set, k0, i, now, d, ttl_slack)
  local block_ms = set[i][7]
  redis.call('SET', KEYS[k0 + set[i][8]], format('B' .. INT, now + block_ms), 'PX', int(block_ms + ttl_slack))
  return blocked_view(d, block_ms)
end

-- One call against the policies of `set`, keys from KEYS[k0 + 1].
local function decide(set, k0, now, cost, max_wait, ttl_slack)
  local n = #set
  if cost < 0 then
    -- Refund: give -cost units back to every policy (buckets and sliding logs), then show each.
    for i = 1, n do
      local policy = set[i]
      local key = KEYS[k0 + i]
      local d
      if policy[2] == 'sliding-log' then
        policy[9](key, now, -cost, policy[4])
        d = policy[1](key, nil, now, 0, policy[3], policy[4], policy[5], policy[6], 0, true)
      else
        local refunded = policy[9](string_at(key), now, -cost, policy[3], policy[4], policy[5], policy[6])
        local state, ttl
        d, state, ttl = policy[1](key, refunded, now, 0, policy[3], policy[4], policy[5], policy[6], 0, true)
        -- Still in debt after the refund, the view refuses and returns no state:
        -- the refunded state is then current already (no time has passed).
        redis.call('SET', key, state or refunded, 'PX', int(max(1, ttl) + ttl_slack))
      end
      d[WAIT] = 0
      -- Units given back do not lift a block: only time does.
      local until_ms = blocked_until(set, k0, i)
      if until_ms > now then
        d[RETRY_AFTER] = 0
        blocked_view(d, until_ms - now)
      end
      push(d)
    end
    return
  end
  if cost == 0 then
    -- Peek: remaining and reset as they stand; allowed / retry for a call of cost 1.
    for i = 1, n do
      local until_ms = blocked_until(set, k0, i)
      if until_ms > now then
        push(blocked_decision(set, k0, i, now, until_ms))
      else
        local d = uncharged(set, k0, i, now)
        local single = run(set, k0, i, now, 1, 0, true)
        d[ALLOWED] = single[ALLOWED]
        d[RETRY_AFTER] = single[RETRY_AFTER]
        push(d)
      end
    end
    return
  end

  if n == 1 then
    -- One policy: the same rule without the bookkeeping (commit iff allowed).
    local until_ms = blocked_until(set, k0, 1)
    if until_ms > now then
      push(blocked_decision(set, k0, 1, now, until_ms))
      return
    end
    local d, state, ttl = run(set, k0, 1, now, cost, max_wait, false)
    if d[ALLOWED] == 1 then
      if type(state) == 'function' then
        state(max(1, ttl) + ttl_slack)
      else
        redis.call('SET', KEYS[k0 + 1], state, 'PX', int(max(1, ttl) + ttl_slack))
      end
    elseif set[1][7] then
      d = block(set, k0, 1, now, d, ttl_slack)
    end
    push(d)
    return
  end

  local decisions, states, ttls, untils = {}, {}, {}, {}
  local all_allowed = true
  for i = 1, n do
    untils[i] = blocked_until(set, k0, i)
    if untils[i] > now then
      -- Blocked: refused without deciding.
      decisions[i] = false
      all_allowed = false
    else
      decisions[i], states[i], ttls[i] = run(set, k0, i, now, cost, max_wait, false)
      if decisions[i][ALLOWED] == 0 then all_allowed = false end
    end
  end

  if all_allowed then
    for i = 1, n do
      local ttl = max(1, ttls[i]) + ttl_slack
      if type(states[i]) == 'function' then
        states[i](ttl)
      else
        redis.call('SET', KEYS[k0 + i], states[i], 'PX', int(ttl))
      end
      push(decisions[i])
    end
  else
    -- All-or-nothing: nothing was written; policies that would have allowed
    -- report their state uncharged.
    for i = 1, n do
      if not decisions[i] then
        push(blocked_decision(set, k0, i, now, untils[i]))
      elseif decisions[i][ALLOWED] == 1 then
        -- Allowed it stays (uncharged, a fixed window reserved ahead would read as refused).
        local d = uncharged(set, k0, i, now)
        d[ALLOWED] = 1
        d[RETRY_AFTER] = 0
        push(d)
      elseif set[i][7] then
        push(block(set, k0, i, now, decisions[i], ttl_slack))
      else
        push(decisions[i])
      end
    end
  end
end

-------------------------------------------------------------------- per call
-- Everything above only defines; from here on is one invocation's work. As a
-- Redis function (RedisStore's `functions` option) the definitions run once,
-- when the library is first called, and only this part runs per call, so it
-- starts by clearing what the last call left.
server_now = nil
reply, size = {}, 0

-- Policy sets, parsed once: each policy as { algorithm function, name, p1..p4,
-- blockMs or nil, its block key's place among the call's keys, its refund
-- function or nil }, and the set's width: the keys of one call.
local sets = {}
local a = 2
for s = 1, tonumber(ARGV[1]) do
  local n = tonumber(ARGV[a])
  local set = {}
  local blocking = 0
  for i = 1, n do
    local base = a + (i - 1) * 6
    local name = ARGV[base + 1]
    local p3 = ARGV[base + 4]
    local block_ms = tonumber(ARGV[base + 6])
    local block_key = nil
    if block_ms then
      blocking = blocking + 1
      block_key = n + blocking
    end
    local decide_with, refund = algorithm(name)
    set[i] = { decide_with, name, tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3]), tonumber(p3) or p3, ARGV[base + 5], block_ms, block_key, refund }
  end
  set.width = n + blocking
  sets[s] = set
  a = a + 1 + 6 * n
end

local k = 0
while a <= #ARGV do
  local now, slack = now_of(ARGV[a])
  if now == nil then
    return redis.error_reply('SLUICE_NO_TIME the server refused TIME inside scripts')
  end
  local cost, max_wait = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local set = sets[tonumber(ARGV[a + 3])]
  local width = set.width
  for _ = 1, tonumber(ARGV[a + 4]) do
    decide(set, k, now, cost, max_wait, slack)
    k = k + width
  end
  a = a + 5
end
return reply
