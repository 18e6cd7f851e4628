-- slidegate's decision library: the second implementation of every algorithm's rule (the
-- first is the crate's Rust; `tests/redis_conformance.rs` holds both to one reference model).
--
-- Loaded once per server as a Redis 7 function library (`FUNCTION LOAD`; `script.rs` adds
-- the header and registers `decide` and `all` under versioned names), so everything here is
-- defined once, not on every call. On a server without functions the same text runs under
-- EVALSHA, followed by a `return decide(KEYS, ARGV)` or `return all(KEYS, ARGV)`.
--
-- Two entry points, each one atomic call:
--   decide: a batch of independent decisions (checks and peeks), each on one key, each
--           judged as if alone, in order: what concurrent callers on one connection send
--           together, so that the call's cost is paid once per batch.
--   all:    several limits at once, all or nothing (check), and the other operations (peek,
--           refund, release, lease).
--
-- Every rule works on a key's state read once into a table (`open`), judged (`at`, `judge`)
-- and changed (`charge`, `refund`, `release`) in Lua, and written back once (`flush`): a
-- batch that decides a key several times reads and writes its hash once.
--
-- Numbers are doubles: every value is an integer below 2^53 (times in µs since the epoch,
-- counts, bucket indices); durations with nanoseconds are (µs, ns) pairs; products that can
-- pass 2^52 go through `muldivmod`. See docs/redis.md for the ranges.

-- The time of the decision being made, µs (the server's TIME, or the caller's in the
-- explicit-time mode).
local now

local function fmt(x)
  return string.format('%.0f', x)
end

-- A number from a reply or an argument (nil for a missing field). Arithmetic converts a
-- string once; `tonumber` converts it twice (Lua 5.1 tests, then converts).
local function num(x)
  if x then
    return x + 0
  end
  return nil
end

-- Exact floor division of a ≥ 0 by c ≥ 1, with a + c < 2^53: the quotient of the rounded
-- double is corrected by its remainder.
local function idiv(a, c)
  local q = math.floor(a / c)
  local r = a - q * c
  if r < 0 then
    q, r = q - 1, r + c
  elseif r >= c then
    q, r = q + 1, r - c
  end
  return q, r
end

-- floor(a·b / c) and a·b mod c, exactly, for a, b < 2^53, 1 ≤ c < 2^48 and a quotient below
-- 2^53: schoolbook multiplication in 24-bit limbs, then long division in 4-bit digits (the
-- running remainder stays below 16·c < 2^52).
local B = 16777216
local function limbs(x)
  local l0 = x % B
  x = (x - l0) / B
  local l1 = x % B
  return l0, l1, (x - l1) / B
end
local function muldivmod(a, b, c)
  local p = a * b
  if p < 4503599627370496 then
    return idiv(p, c)
  end
  local a0, a1, a2 = limbs(a)
  local b0, b1, b2 = limbs(b)
  local d = { a0 * b0, a0 * b1 + a1 * b0, a0 * b2 + a1 * b1 + a2 * b0, a1 * b2 + a2 * b1, a2 * b2, 0 }
  for i = 1, 5 do
    local lo = d[i] % B
    d[i + 1] = d[i + 1] + (d[i] - lo) / B
    d[i] = lo
  end
  local q, r = 0, 0
  for i = 6, 1, -1 do
    local limb = d[i]
    for s = 5, 0, -1 do
      local digit = math.floor(limb / 16 ^ s) % 16
      r = r * 16 + digit
      local qd = math.floor(r / c)
      r = r - qd * c
      q = q * 16 + qd
    end
  end
  return q, r
end

-- (µs, ns) pairs, 0 ≤ ns < 1000.
local function norm(u, n)
  local k = math.floor(n / 1000)
  return u + k, n - k * 1000
end
local function padd(au, an, bu, bn)
  return norm(au + bu, an + bn)
end
local function psub(au, an, bu, bn)
  return norm(au - bu, an - bn)
end
local function plt(au, an, bu, bn)
  return au < bu or (au == bu and an < bn)
end
local function pmax(au, an, bu, bn)
  if plt(au, an, bu, bn) then
    return bu, bn
  end
  return au, an
end
local function pmul(k, u, n)
  return norm(k * u, k * n)
end
-- floor(X / T) for pairs, X ≥ 0, T ≥ 1 ns, a quotient far below 2^53: the double estimate is
-- within one of it, and corrected exactly.
local function pdiv(xu, xn, tu, tn)
  local q = math.floor((xu * 1000 + xn) / (tu * 1000 + tn))
  if q < 0 then
    q = 0
  end
  while q > 0 do
    local mu, mn = pmul(q, tu, tn)
    if plt(xu, xn, mu, mn) then
      q = q - 1
    else
      break
    end
  end
  while true do
    local mu, mn = pmul(q + 1, tu, tn)
    if plt(xu, xn, mu, mn) then
      break
    end
    q = q + 1
  end
  return q
end
-- A pair clamped at zero.
local function ppos(u, n)
  if u < 0 then
    return 0, 0
  end
  return u, n
end

-- Milliseconds a key of quota q must outlive `us` microseconds from now, plus the slack.
local function ttl(q, us)
  return math.floor(us / 1000) + 1 + q.slack
end

-- Writes a state's changed fields (those named in `s.dirty`, and the shape's tag on a key
-- written for the first time), then the TTL its last change asked for.
local function flush(s, fields)
  if s.fresh then
    fields[#fields + 1] = 'k'
    fields[#fields + 1] = s.q.kind
    s.fresh = false
  end
  redis.call('HSET', s.H, unpack(fields))
  s.dirty = false
  if s.ttl then
    redis.call('PEXPIRE', s.H, s.ttl)
    if s.q.mode ~= 4 then
      redis.call('PEXPIRE', s.Z, s.ttl)
    end
    s.ttl = false
  end
end

-- Every rule is a table of functions over a key's state `s`:
--   open(H, Z, q) -> s     reads the state (a key holding another shape is reset)
--   at(s)                  places the decision at `now` (s.t: the time judged at)
--   judge(s, n, peek)      -> allowed, remaining, retry (µs, ns), reset (µs, ns)
--   charge(s, n)           counts n admitted at s.t (after a judge that admitted it)
--   refund(s, n) -> freed  frees up to n of the oldest units counted
--   release(s, back, ticket_u, ticket_n)  removes a charge as if never made
--   valid(s)               how long a lease taken now may be used, µs (-1: any time)
--   flush(s)               writes what changed
-- s.ticket_u, s.ticket_n say where a charge landed (for release).

------------------------------------------------------------------------------------------
-- The sliding-window counter (Strict, Weighted) and the fixed window, as the local ring:
-- `c` counts every unit ever admitted; the sorted set holds, for each bucket that admitted
-- something, the snapshot of `c` when that bucket started (score: the bucket index, member:
-- "snapshot:bucket"); `fl` is a floor every snapshot is raised to (refunds). The cost in
-- buckets x ..= b is c − snapshot(x), where snapshot(x) is that of the first bucket ≥ x
-- that admitted something (c if none): O(log n) whatever N is, and nothing is ever swept.
--
-- The two snapshots at the start of the window, read by every decision, are kept in the
-- hash (`pb cb cs cb2 cs2`: pb < x ≤ cb reads cs, cb < x ≤ cb2 reads cs2; -1 for none),
-- valid because buckets are only ever written past the newest: an admission in a bucket
-- already written reads and writes the hash alone.
--
-- `decide`'s fast path (`counter.fast`) goes further for a check in the newest bucket
-- written, f: the window's start is then fixed, so the two snapshots it reads, floored,
-- are kept as `bs` = snapshot(f − N) and `bs1` = snapshot(f − N + 1), with `bb` = f; bb is
-- -1 when they are not known. Whatever moves f, the floor or a snapshot (a new bucket, a
-- refund, a release) sets bb to -1: a decision at bucket bb then reads four fields of the
-- hash (k, c, bb and its base), decides, and writes c.
--
-- Strict with last-admission marks (mode 5) is Strict whose oldest bucket is left out once
-- its last admission has left the window, as the local ring judges it: a mark m per bucket
-- bounds the offset of its last admission, (m − 1)·step ns with step = ⌈G·1000 / 254⌉ ns,
-- rounded up (0: none recorded). The newest bucket written keeps its mark in the hash
-- (`fm`); when a later bucket is written, its entry in the sorted set takes the mark as a
-- third part of its member ("snapshot:bucket:mark"), so a mark is one O(log n) lookup. It
-- judges on the general path (no fast path), with ns values below 2^53: G·1000 + 254 <
-- 2^53 (G up to about 104 days), which `script.rs` checks.
------------------------------------------------------------------------------------------
local counter = {}

-- f, the floor and the cache, from v[o + 1 ..].
local function counter_rest(s, v, o)
  s.f, s.fl = v[o + 1] + 0, num(v[o + 2]) or 0
  s.f0, s.fl0 = s.f, s.fl
  if v[o + 4] then
    s.pb, s.cb, s.cs, s.cb2, s.cs2 = v[o + 3] + 0, v[o + 4] + 0, v[o + 5] + 0, v[o + 6] + 0, v[o + 7] + 0
  end
  s.fm = num(v[o + 8]) or 0
  s.fm0 = s.fm
  s.loaded = true
end

-- `lazy` (decide): read only what the fast path needs (c, bb and the base its mode reads);
-- `load` reads the rest if the general rule runs. Otherwise (all) everything but the bases,
-- which only the fast path reads.
function counter.open(H, Z, q, lazy)
  local v
  local mode = q.mode
  if not lazy then
    v = redis.call('HMGET', H, 'k', 'c', 'f', 'fl', 'pb', 'cb', 'cs', 'cb2', 'cs2', 'fm')
  elseif mode == 0 then
    v = redis.call('HMGET', H, 'k', 'c', 'bb', 'bs')
  elseif mode == 2 then
    v = redis.call('HMGET', H, 'k', 'c', 'bb', 'bs1')
  else
    v = redis.call('HMGET', H, 'k', 'c', 'bb', 'bs', 'bs1')
  end
  -- Every field the rule sets, so that the table is sized once.
  local s = { H = H, Z = Z, q = q, c = 0, f = -1, fl = 0, pb = -1, cb = -1, cs = 0, cb2 = -1, cs2 = 0,
    bb = -1, bs = 0, bs1 = 0, based = false, fresh = false, dirty = false, cached = false, ttl = false,
    memo = false, b = 0, r = 0, t = 0, ticket_u = 0, ticket_n = 0, f0 = -1, fl0 = 0, loaded = true,
    fm = 0, fm0 = 0 }
  if v[1] ~= q.kind then
    s.fresh = true
    if v[1] then
      redis.call('DEL', H, Z)
    end
    return s
  end
  s.c = v[2] + 0
  if not lazy then
    counter_rest(s, v, 2)
    return s
  end
  s.loaded = false
  local bb = num(v[3]) or -1
  if bb >= 0 then
    -- bb is f (see above).
    s.bb, s.f = bb, bb
    if mode == 0 then
      s.bs = v[4] + 0
    elseif mode == 2 then
      s.bs1 = v[4] + 0
    else
      s.bs, s.bs1 = v[4] + 0, v[5] + 0
    end
  end
  return s
end

function counter.load(s)
  if not s.loaded then
    counter_rest(s, redis.call('HMGET', s.H, 'f', 'fl', 'pb', 'cb', 'cs', 'cb2', 'cs2', 'fm'), 0)
  end
end

function counter.at(s)
  local G = s.q.G
  local b, r = idiv(now, G)
  local t = now
  if b < s.f then
    -- A clock older than the newest bucket seen: judged at that bucket's start.
    b, r, t = s.f, 0, s.f * G
  end
  s.b, s.r, s.t = b, r, t
  s.lu, s.ln = t - now, 0
  s.ticket_u, s.ticket_n = b, 0
  s.memo = false
end

local function member_snapshot(m)
  return string.match(m, '^(%d+):') + 0
end

-- The snapshot of the first bucket ≥ x that admitted something (c if none), raised to the
-- floor; a lookup at the window's start refills the hash's cache.
local function snapshot(s, x)
  if x > s.f then
    return s.c
  end
  local v
  if s.cb >= 0 and s.pb < x and x <= s.cb then
    v = s.cs
  elseif s.cb2 >= 0 and s.cb < x and x <= s.cb2 then
    v = s.cs2
  elseif x <= s.b - s.q.N + 1 then
    local e = redis.call('ZRANGEBYSCORE', s.Z, x, '+inf', 'WITHSCORES', 'LIMIT', 0, 2)
    if e[1] then
      s.pb, s.cb, s.cs = x - 1, e[2] + 0, member_snapshot(e[1])
      if e[3] then
        s.cb2, s.cs2 = e[4] + 0, member_snapshot(e[3])
      else
        s.cb2, s.cs2 = -1, 0
      end
      s.cached = true
      v = s.cs
    else
      v = s.c
    end
  else
    local e = redis.call('ZRANGEBYSCORE', s.Z, x, '+inf', 'LIMIT', 0, 1)
    v = e[1] and member_snapshot(e[1]) or s.c
  end
  if v < s.fl then
    v = s.fl
  end
  return v
end

-- tail(j): the cost in buckets b − N + j ..= b, 0 ≤ j ≤ N + 1.
local function tail(s, j)
  local N = s.q.N
  if j > N then
    return 0
  end
  local m = s.memo
  if not m then
    m = {}
    s.memo = m
  end
  local v = m[j]
  if v == nil then
    v = s.c - snapshot(s, s.b - N + j)
    m[j] = v
  end
  return v
end

-- The first x in lo..hi-1 with pred(x) false (hi if none), pred true then false.
local function first_false(lo, hi, pred)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if pred(mid) then
      lo = mid + 1
    else
      hi = mid
    end
  end
  return lo
end

-- The first j with nothing in buckets b − N + j ..= b (N + 1 if the newest bucket holds
-- something).
local function newest(s)
  if tail(s, s.q.N) > 0 then
    return s.q.N + 1
  end
  return first_false(0, s.q.N, function(j)
    return tail(s, j) > 0
  end)
end

-- Microseconds from offset r of bucket b to the start of bucket b + j.
local function after(s, j)
  local a = j * s.q.G - s.r
  if a < 0 then
    return 0
  end
  return a
end

-- Strict with marks (see above). q.step is ⌈G·1000 / 254⌉ ns; ns values stay below 2^53.
-- The mark of bucket x: the hash's for the newest bucket written, else its entry's third
-- part (0 if it has none: a bucket nothing was admitted in).
local function bucket_mark(s, x)
  if x > s.f then
    return 0
  end
  if x == s.f then
    return s.fm
  end
  local e = redis.call('ZRANGEBYSCORE', s.Z, x, x, 'LIMIT', 0, 1)
  local m = e[1] and string.match(e[1], '^%d+:%d+:(%d+)$')
  if m then
    return m + 0
  end
  return 0
end
-- The mark an admission at offset r (µs) needs: ⌈r·1000 / step⌉ + 1.
local function mark_for(q, r)
  return idiv(r * 1000 + q.step - 1, q.step) + 1
end
-- Whether, at offset r, the oldest bucket's last admission (mark m) has left: (m − 1)·step ≤
-- r·1000, never for m = 0.
local function has_left(q, r, m)
  return m >= 1 and (m - 1) * q.step <= r * 1000
end
-- Where in its bucket a bucket with mark m last admitted, at the latest, as (µs, ns):
-- (m − 1)·step, at most G; G for m = 0.
local function mark_offset(q, m)
  local ns = q.G * 1000
  if m >= 1 and (m - 1) * q.step < ns then
    ns = (m - 1) * q.step
  end
  return idiv(ns, 1000)
end
-- From offset r of bucket b until bucket b − N + j's last admission (mark m) leaves:
-- j·G + mark_offset(m) − r, at least 0.
local function after_mark(s, j, m)
  local ou, on = mark_offset(s.q, m)
  return ppos(padd(j * s.q.G - s.r, 0, ou, on))
end
-- Until the window holds nothing: the newest non-empty bucket b − N + nw − 1 leaves when its
-- last admission does.
local function marked_reset(s, nw)
  if nw == 0 then
    return 0, 0
  end
  return after_mark(s, nw - 1, bucket_mark(s, s.b - s.q.N + nw - 1))
end

local function marked_judge(s, n, peek)
  local q = s.q
  local L, N, r = q.L, q.N, s.r
  local used = tail(s, 0)
  if has_left(q, r, bucket_mark(s, s.b - N)) then
    used = tail(s, 1)
  end
  if used + n <= L then
    if peek then
      local su, sn = marked_reset(s, newest(s))
      return 1, L - used, 0, 0, su, sn
    end
    -- Clear once this bucket's last admission, this one included, leaves: W + its offset − r.
    local m = math.max(bucket_mark(s, s.b), mark_for(q, r))
    local ou, on = mark_offset(q, m)
    local su, sn = padd(q.W - r, 0, ou, on)
    return 1, L - used - n, 0, 0, su, sn
  end
  local nw = newest(s)
  -- In bucket b + j the request fits once bucket b − N + j has left, if tail(j + 1) + n ≤ L:
  -- it leaves at its mark.
  local j = first_false(0, nw, function(x)
    return tail(s, x + 1) + n > L
  end)
  local ru, rn = after_mark(s, j, bucket_mark(s, s.b - N + j))
  if ru == 0 and rn == 0 then
    rn = 1
  end
  local su, sn = marked_reset(s, nw)
  return 0, math.max(L - used, 0), ru, rn, su, sn
end

-- The cost each mode's rule counts now.
-- Strict: buckets b − N ..= b.
local function strict_used(s)
  return tail(s, 0)
end
-- Weighted: b − N + 1 ..= b, and bucket b − N weighed by (G − r) / G, rounded up.
local function weighted_used(s)
  local all, rest = tail(s, 0), tail(s, 1)
  if rest > all then
    rest = all
  end
  local G = s.q.G
  local q, rm = muldivmod(all - rest, G - s.r, G)
  if rm > 0 then
    q = q + 1
  end
  return rest + q
end
-- The fixed window: bucket b alone (N = 1).
local function fixed_used(s)
  return tail(s, s.q.N)
end

-- Strict: the first bucket boundary after which the oldest buckets that leave make room.
local function strict_retry(s, n)
  local L = s.q.L
  local j = first_false(1, newest(s), function(x)
    return tail(s, x) + n > L
  end)
  return after(s, j), 0
end

-- Weighted: in bucket b + j the oldest bucket holds C_j = tail(j) − tail(j + 1) and the rest
-- S_j = tail(j + 1); with A_j = L − n − S_j ≥ 0 the request fits from offset
-- G − ⌊A_j·G / C_j⌋ on (in ns: G is whole µs, the offset need not be).
local function weighted_retry(s, n)
  local L, G, N, r = s.q.L, s.q.G, s.q.N, s.r
  local first = first_false(0, math.max(newest(s) - 1, 0), function(x)
    return tail(s, x + 1) + n > L
  end)
  for j = first, N do
    local rest = tail(s, j + 1)
    local oldest = tail(s, j) - math.min(rest, tail(s, j))
    local room = L - n - rest
    if room >= 0 then
      local fu, fn = 0, 0
      if oldest > 0 and room < oldest then
        -- ⌊A·G·1000 / C⌋ ns = ⌊A·G / C⌋ µs and ⌊1000·(A·G mod C) / C⌋ ns.
        local q, rm = muldivmod(room, G, oldest)
        local sub = idiv(rm * 1000, oldest)
        fu, fn = psub(G, 0, q, sub)
      end
      if plt(fu, fn, G, 0) then
        local au, an = padd(j * G - r, 0, fu, fn)
        if plt(au, an, 0, 1) then
          au, an = 0, 1
        end
        return au, an
      end
    end
  end
  return (N + 1) * G - r, 0
end

function counter.judge(s, n, peek)
  local q = s.q
  local L, mode = q.L, q.mode
  if mode == 5 then
    return marked_judge(s, n, peek)
  end
  if mode == 2 then
    local used = fixed_used(s)
    local nxt = q.G - s.r
    if used + n > L then
      return 0, math.max(L - used, 0), nxt, 0, nxt, 0
    end
    local charged = peek and 0 or n
    local reset = (used + charged > 0) and nxt or 0
    return 1, L - used - charged, 0, 0, reset, 0
  end
  local used
  if mode == 1 then
    used = weighted_used(s)
  else
    used = strict_used(s)
  end
  if used + n <= L then
    if peek then
      return 1, L - used, 0, 0, after(s, newest(s)), 0
    end
    return 1, L - used - n, 0, 0, (q.N + 1) * q.G - s.r, 0
  end
  local ru, rn
  if mode == 1 then
    ru, rn = weighted_retry(s, n)
  else
    ru, rn = strict_retry(s, n)
  end
  return 0, math.max(L - used, 0), ru, rn, after(s, newest(s)), 0
end

function counter.charge(s, n)
  local b, q = s.b, s.q
  if q.mode == 5 then
    local m = mark_for(q, s.r)
    if b > s.f then
      -- The newest bucket's mark moves from the hash to its entry, which outlives it.
      if s.f >= 0 and s.fm > 0 and s.f >= b - q.N then
        local e = redis.call('ZRANGEBYSCORE', s.Z, s.f, s.f, 'LIMIT', 0, 1)
        if e[1] then
          redis.call('ZREM', s.Z, e[1])
          redis.call('ZADD', s.Z, s.f, e[1] .. ':' .. fmt(s.fm))
        end
      end
      s.fm = m
    elseif m > s.fm then
      s.fm = m
    end
  end
  if b > s.f then
    redis.call('ZADD', s.Z, b, fmt(s.c) .. ':' .. fmt(b))
    redis.call('ZREMRANGEBYSCORE', s.Z, '-inf', '(' .. fmt(b - q.N))
    -- The cache must see the new bucket if it ends before it.
    if s.cb < 0 then
      s.pb, s.cb, s.cs, s.cb2, s.cs2 = s.f, b, s.c, -1, 0
      s.cached = true
    elseif s.cb2 < 0 then
      s.cb2, s.cs2 = b, s.c
      s.cached = true
    end
    s.f = b
    s.bb, s.based = -1, true
    -- Everything in bucket b has left every window when bucket b + N + 1 starts.
    s.ttl = ttl(q, (q.N + 1) * q.G - s.r)
  end
  s.c = s.c + n
  s.dirty = true
  s.memo = false
end

-- Frees up to n of the oldest units the window counts (the current bucket alone for the
-- fixed window) by raising the floor of every snapshot.
function counter.refund(s, n)
  local q = s.q
  local first = s.b - q.N
  if q.mode == 2 then
    first = s.b
  elseif q.mode == 5 and tail(s, 1) < tail(s, 0) and has_left(q, s.r, bucket_mark(s, first)) then
    -- The oldest bucket has left the window: the oldest units it counts are next.
    first = first + 1
  end
  local v = snapshot(s, first)
  local take = math.min(n, s.c - v)
  if take <= 0 then
    return 0
  end
  s.fl = v + take
  s.bb, s.based = -1, true
  s.dirty = true
  s.memo = false
  return take
end

-- Gives back `back` units charged in bucket `bt`: as if they had never been admitted.
function counter.release(s, back, bt)
  if back <= 0 or s.fresh or bt < s.b - s.q.N or bt > s.f then
    return
  end
  local later = redis.call('ZRANGEBYSCORE', s.Z, '(' .. fmt(bt), '+inf')
  for _, m in ipairs(later) do
    -- A mark (Strict with marks) stays: a released unit only keeps its bucket counted longer.
    local v, x, mark = string.match(m, '^(%d+):(%d+)(.*)$')
    redis.call('ZREM', s.Z, m)
    redis.call('ZADD', s.Z, x, fmt(tonumber(v) - back) .. ':' .. x .. mark)
  end
  s.c = s.c - back
  if s.fl > s.c then
    s.fl = s.c
  end
  -- Snapshots moved: the cache starts again from the sorted set.
  s.pb, s.cb, s.cs, s.cb2, s.cs2, s.cached = -1, -1, 0, -1, 0, true
  s.bb, s.based = -1, true
  s.dirty = true
  s.memo = false
end

function counter.valid(s)
  return s.q.G - s.r
end

-- The fast path of `decide`: a check of n ≥ 1 at `now` in the newest bucket written (b = f),
-- judged from c and the window start's snapshots alone, as `judge` would. Returns the
-- remaining units and the reset (µs) if it admits, nil if the general rule must decide (a
-- denial, another bucket).
function counter.fast(s, n)
  local q = s.q
  if q.mode == 5 then
    return nil
  end
  local G = q.G
  local b, r = idiv(now, G)
  if b ~= s.bb then
    counter.load(s)
    if b ~= s.f then
      return nil
    end
    s.b, s.r = b, r
    s.bs, s.bs1 = snapshot(s, b - q.N), snapshot(s, b - q.N + 1)
    s.bb, s.based = b, true
  end
  local c, mode = s.c, q.mode
  local used
  if mode == 0 then
    used = c - s.bs
  elseif mode == 2 then
    used = c - s.bs1
  else
    local all, rest = c - s.bs, c - s.bs1
    if rest > all then
      rest = all
    end
    local w, rm = muldivmod(all - rest, G - r, G)
    if rm > 0 then
      w = w + 1
    end
    used = rest + w
  end
  local left = q.L - used - n
  if left < 0 then
    return nil
  end
  s.c = c + n
  s.dirty = true
  if mode == 2 then
    return left, G - r
  end
  return left, (q.N + 1) * G - r
end

function counter.flush(s)
  if not (s.dirty or s.cached or s.based) then
    return
  end
  local fields
  if s.fresh then
    -- The fields a decision reads first: a small hash is a list, searched in order.
    fields = { 'k', s.q.kind, 'c', s.c, 'bb', s.bb, 'bs', s.bs, 'bs1', s.bs1, 'f', s.f, 'fl', s.fl }
    s.fresh, s.based = false, false
  elseif s.cached or (s.loaded and (s.f ~= s.f0 or s.fl ~= s.fl0)) then
    fields = { 'c', s.c, 'f', s.f, 'fl', s.fl }
  else
    -- Only c moved.
    fields = { 'c', s.c }
  end
  if s.fm ~= s.fm0 then
    fields[#fields + 1] = 'fm'
    fields[#fields + 1] = s.fm
    s.fm0 = s.fm
  end
  if s.cached then
    for _, x in ipairs({ 'pb', s.pb, 'cb', s.cb, 'cs', s.cs, 'cb2', s.cb2, 'cs2', s.cs2 }) do
      fields[#fields + 1] = x
    end
    s.cached = false
  end
  if s.based then
    local k = #fields
    fields[k + 1] = 'bb'
    fields[k + 2] = s.bb
    if s.bb >= 0 then
      fields[k + 3] = 'bs'
      fields[k + 4] = s.bs
      fields[k + 5] = 'bs1'
      fields[k + 6] = s.bs1
    end
    s.based = false
  end
  s.f0, s.fl0 = s.f, s.fl
  flush(s, fields)
end

------------------------------------------------------------------------------------------
-- The exact log: `c` units ever admitted, `g` units gone (expired or refunded: always the
-- oldest), `ts` the newest admission's time. The sorted set holds one entry per admission
-- time: score = c after its last unit (its "end"), member = the time. Entries ending at or
-- below g are removed, so the live ones start at rank 0.
------------------------------------------------------------------------------------------
local log = {}

function log.open(H, Z, q)
  local v = redis.call('HMGET', H, 'k', 'c', 'g', 'ts')
  local s = { H = H, Z = Z, q = q, c = 0, g = 0, ts = -1 }
  s.fresh = v[1] ~= q.kind
  if s.fresh then
    if v[1] then
      redis.call('DEL', H, Z)
    end
  else
    s.c, s.g, s.ts = tonumber(v[2]), tonumber(v[3]), tonumber(v[4])
  end
  return s
end

local function log_entry(s, rank)
  local e = redis.call('ZRANGE', s.Z, rank, rank, 'WITHSCORES')
  if e[1] then
    return tonumber(e[1]), tonumber(e[2])
  end
  return nil
end

-- Units that left the window: the entries from rank 0 up to the last expired one.
function log.at(s)
  local t = math.max(now, s.ts)
  s.t = t
  s.lu, s.ln = t - now, 0
  s.ticket_u, s.ticket_n = t, 0
  local W = s.q.W
  local function expired(rank)
    local at = log_entry(s, rank)
    return at ~= nil and at + W <= t
  end
  if not s.fresh and s.g < s.c and expired(0) then
    local lo, hi = 0, 1
    while expired(hi) do
      lo, hi = hi, hi * 2
    end
    while hi - lo > 1 do
      local mid = math.floor((lo + hi) / 2)
      if expired(mid) then
        lo = mid
      else
        hi = mid
      end
    end
    local _, e = log_entry(s, lo)
    s.g = math.max(s.g, e)
    redis.call('ZREMRANGEBYRANK', s.Z, 0, lo)
    s.dirty = true
  end
end

function log.judge(s, n, peek)
  local L, W, t = s.q.L, s.q.W, s.t
  local within = s.c - s.g
  if within + n > L then
    -- The (within + n − L)-th oldest unit must leave.
    local u = s.g + within + n - L - 1
    local e = redis.call('ZRANGEBYSCORE', s.Z, '(' .. fmt(u), '+inf', 'LIMIT', 0, 1)
    return 0, L - within, tonumber(e[1]) + W - t, 0, s.ts + W - t, 0
  end
  if peek then
    local reset = 0
    if within > 0 then
      reset = s.ts + W - t
    end
    return 1, L - within, 0, 0, reset, 0
  end
  return 1, L - within - n, 0, 0, W, 0
end

function log.charge(s, n)
  redis.call('ZADD', s.Z, fmt(s.c + n), fmt(s.t))
  s.c = s.c + n
  s.ts = s.t
  s.dirty = true
  s.ttl = ttl(s.q, s.q.W)
end

function log.refund(s, n)
  local take = math.min(n, s.c - s.g)
  if take <= 0 then
    return 0
  end
  s.g = s.g + take
  redis.call('ZREMRANGEBYSCORE', s.Z, '-inf', fmt(s.g))
  s.dirty = true
  return take
end

-- Gives back `back` units admitted at time `at`: the entry of that time loses them, every
-- later entry's end moves down by as much.
function log.release(s, back, at)
  if back <= 0 or s.fresh then
    return
  end
  local Z = s.Z
  local e = redis.call('ZSCORE', Z, fmt(at))
  if not e then
    return
  end
  local last = tonumber(e)
  local prev = redis.call('ZREVRANGEBYSCORE', Z, '(' .. fmt(last), '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local start = s.g
  if prev[2] then
    start = math.max(start, tonumber(prev[2]))
  end
  local later = redis.call('ZRANGEBYSCORE', Z, '(' .. fmt(last), '+inf', 'WITHSCORES')
  for i = 1, #later, 2 do
    redis.call('ZADD', Z, fmt(tonumber(later[i + 1]) - back), later[i])
  end
  if last - back <= start then
    redis.call('ZREM', Z, fmt(at))
  else
    redis.call('ZADD', Z, fmt(last - back), fmt(at))
  end
  s.c = s.c - back
  if s.g > s.c then
    s.g = s.c
  end
  local top = redis.call('ZRANGE', Z, -1, -1)
  if top[1] then
    s.ts = tonumber(top[1])
  end
  s.dirty = true
end

function log.valid(s)
  return 0
end

function log.flush(s)
  if s.dirty then
    flush(s, { 'c', fmt(s.c), 'g', fmt(s.g), 'ts', fmt(s.ts) })
  end
end

------------------------------------------------------------------------------------------
-- GCRA: the theoretical arrival time as a (µs, ns) pair in the hash (fields u, n).
------------------------------------------------------------------------------------------
local gcra = {}

function gcra.open(H, Z, q)
  local v = redis.call('HMGET', H, 'k', 'u', 'n')
  local s = { H = H, Z = Z, q = q, au = 0, an = 0 }
  s.fresh = v[1] ~= q.kind
  if s.fresh then
    if v[1] then
      redis.call('DEL', H, Z)
    end
  else
    s.au, s.an = tonumber(v[2]), tonumber(v[3])
  end
  return s
end

-- A reading older than the state's newest lower bound, TAT − τ, is judged at that bound.
function gcra.at(s)
  local q = s.q
  s.tu, s.tn = pmax(now, 0, psub(s.au, s.an, q.tau_u, q.tau_n))
  s.t = s.tu
  s.lu, s.ln = psub(s.tu, s.tn, now, 0)
  s.ticket_u, s.ticket_n = s.au, s.an
end

local function gcra_units(q, xu, xn)
  return pdiv(xu, xn, q.Tu, q.Tr)
end

-- The units that fit at (xu, xn) with the arrival time at (nu, nn).
local function gcra_room(q, xu, xn, nu, nn)
  local top_u, top_n = padd(nu, nn, q.tau_u, q.tau_n)
  local bu, bn = pmax(xu, xn, nu, nn)
  return gcra_units(q, ppos(psub(top_u, top_n, bu, bn)))
end

function gcra.judge(s, n, peek)
  local q = s.q
  local au, an, tu, tn = s.au, s.an, s.tu, s.tn
  local bu, bn = pmax(au, an, tu, tn)
  local cu, cn = pmul(n, q.Tu, q.Tr)
  local nu, nn = padd(bu, bn, cu, cn)
  s.nu, s.nn = nu, nn
  local top_u, top_n = padd(tu, tn, q.tau_u, q.tau_n)
  local wu, wn = ppos(psub(au, an, tu, tn))
  if not plt(top_u, top_n, nu, nn) then
    if peek then
      return 1, gcra_units(q, psub(top_u, top_n, bu, bn)), 0, 0, wu, wn
    end
    local su, sn = psub(nu, nn, tu, tn)
    return 1, gcra_units(q, psub(top_u, top_n, nu, nn)), 0, 0, su, sn
  end
  local rem = gcra_units(q, ppos(psub(top_u, top_n, bu, bn)))
  local ru, rn = psub(nu, nn, q.tau_u, q.tau_n)
  ru, rn = psub(ru, rn, tu, tn)
  return 0, rem, ru, rn, wu, wn
end

-- A reading older than the state's newest time is judged at that time (each rule's `at`
-- keeps the difference, (lu, ln)), and the retry and the reset are measured from the
-- reading, `now`: on the clock that read it they are that much longer, as the local limiters
-- count them.
local function from_reading(judge)
  return function(s, n, peek)
    local allowed, rem, ru, rn, su, sn = judge(s, n, peek)
    local lu, ln = s.lu or 0, s.ln or 0
    if lu ~= 0 or ln ~= 0 then
      if allowed == 0 then
        ru, rn = padd(ru, rn, lu, ln)
      end
      if su ~= 0 or sn ~= 0 then
        su, sn = padd(su, sn, lu, ln)
      end
    end
    return allowed, rem, ru, rn, su, sn
  end
end
counter.judge = from_reading(counter.judge)
log.judge = from_reading(log.judge)
gcra.judge = from_reading(gcra.judge)

-- The arrival time moved to (au, an): written at the flush, with a TTL until it passes.
local function gcra_moved(s, au, an)
  s.au, s.an = au, an
  s.dirty = true
  s.ttl = ttl(s.q, math.max(psub(au, an, now, 0) + 1, 0))
end

function gcra.charge(s, n)
  -- `judge` computed the new arrival time.
  gcra_moved(s, s.nu, s.nn)
  s.ticket_u, s.ticket_n = s.au, s.an
end

function gcra.refund(s, n)
  if not plt(now, 0, s.au, s.an) then
    return 0
  end
  local q = s.q
  local cu, cn = pmul(n, q.Tu, q.Tr)
  local xu, xn = pmax(now, 0, psub(s.au, s.an, cu, cn))
  local freed = gcra_room(q, xu, xn, now, 0) - gcra_room(q, s.au, s.an, now, 0)
  gcra_moved(s, xu, xn)
  return freed
end

-- Gives back the part of a charge of `back` that wrote arrival time `ticket` and has not
-- drained.
function gcra.release(s, back, bu, bn)
  if back <= 0 or s.fresh then
    return
  end
  local cu, cn = pmul(back, s.q.Tu, s.q.Tr)
  local uu, un = ppos(psub(bu, bn, now, 0))
  if plt(cu, cn, uu, un) then
    uu, un = cu, cn
  end
  if uu == 0 and un == 0 then
    return
  end
  gcra_moved(s, ppos(psub(s.au, s.an, uu, un)))
end

function gcra.valid(s)
  return -1
end

function gcra.flush(s)
  if s.dirty then
    flush(s, { 'u', fmt(s.au), 'n', fmt(s.an) })
  end
end

------------------------------------------------------------------------------------------
-- Quotas, as the caller sends them: mode (0 Strict, 1 Weighted, 2 fixed window, 3 exact
-- log, 4 GCRA, 5 Strict with marks), L, W (µs), G (µs), N, Tu, Tr (GCRA's interval T = Tu µs + Tr ns), and the
-- TTL slack in milliseconds: 8 numbers from args[o + 1].
------------------------------------------------------------------------------------------
local RULES = { [0] = counter, [1] = counter, [2] = counter, [3] = log, [4] = gcra, [5] = counter }

local function quota(args, o)
  local q = {}
  q.mode, q.L, q.W, q.G = tonumber(args[o + 1]), tonumber(args[o + 2]), tonumber(args[o + 3]), tonumber(args[o + 4])
  q.N, q.Tu, q.Tr, q.slack = tonumber(args[o + 5]), tonumber(args[o + 6]), tonumber(args[o + 7]), tonumber(args[o + 8])
  q.rule = RULES[q.mode]
  if q.mode <= 2 then
    q.kind = 'c' .. args[o + 4]
  elseif q.mode == 5 then
    -- Its own kind: a Strict key's entries carry no marks.
    q.kind = 'm' .. args[o + 4]
    q.step = idiv(q.G * 1000 + 253, 254)
  elseif q.mode == 3 then
    q.kind = 'l'
  else
    q.kind = 'g'
    q.tau_u, q.tau_n = pmul(q.L, q.Tu, q.Tr)
  end
  return q
end

-- The quotas `decide` has met, by their text (the 8 numbers, space-separated): parsed once
-- while the library stays loaded, not once per call. At most 256 are kept.
local parsed, nparsed = {}, 0
local function quota_text(text)
  local q = parsed[text]
  if q == nil then
    local a = {}
    for x in string.gmatch(text, '%d+') do
      a[#a + 1] = x
    end
    q = quota(a, 0)
    if nparsed >= 256 then
      parsed, nparsed = {}, 0
    end
    parsed[text] = q
    nparsed = nparsed + 1
  end
  return q
end

-- The server's time in µs.
local function server_time()
  local tm = redis.call('TIME')
  return tm[1] * 1000000 + tm[2]
end

------------------------------------------------------------------------------------------
-- decide: KEYS, a state hash and a sorted set per key (sharing its hash tag);
-- ARGV: the number of quotas Q, Q quotas (each its 8 numbers in one text, space-separated),
-- then per decision one number,
-- ((n·1024 + quota index)·1024 + key index)·2 + explicit (indices from 0; n the cost, 0
-- for a peek of cost 1), followed, if explicit is 1, by the time in µs (else the server's
-- TIME, read once per call). n < 2^31, so the number stays below 2^52.
-- Reply, per decision: a head, rem·8 + flags (1: allowed, 2: a time follows, 4: reset's ns
-- follow), then the time judged at (µs) if it differs from the previous decision's, the
-- reset (µs, then ns if flagged), and when denied the retry (µs, ns). An admission judged at
-- the previous decision's time is two numbers.
------------------------------------------------------------------------------------------
local function decide(keys, args)
  local nq = args[1] + 0
  local quotas = {}
  for i = 1, nq do
    quotas[i] = quota_text(args[1 + i])
  end
  local server, last = nil, -1
  local states, opened, out = {}, {}, {}
  local o, e, na = 0, 2 + nq, #args
  while e <= na do
    local x = args[e] + 0
    e = e + 1
    local explicit = x % 2
    x = (x - explicit) / 2
    local ki = x % 1024
    x = (x - ki) / 1024
    local qi = x % 1024
    local n = (x - qi) / 1024
    local q = quotas[qi + 1]
    if explicit == 1 then
      now = args[e] + 0
      e = e + 1
    else
      if server == nil then
        server = server_time()
      end
      now = server
    end
    local rule = q.rule
    local s = states[ki]
    if s == nil or s.q ~= q then
      if s ~= nil then
        s.q.rule.flush(s)
      end
      s = rule.open(keys[2 * ki + 1], keys[2 * ki + 2], q, true)
      states[ki] = s
      opened[#opened + 1] = s
    end
    local rem, su
    if n > 0 and rule.fast then
      rem, su = rule.fast(s, n)
    end
    if rem then
      -- Admitted at now. (Lua 5.1 assigns a list right to left: one at a time keeps `out`
      -- an array.)
      if now == last then
        out[o + 1] = rem * 8 + 1
        out[o + 2] = su
        o = o + 2
      else
        out[o + 1] = rem * 8 + 3
        out[o + 2] = now
        out[o + 3] = su
        o = o + 3
        last = now
      end
    else
      if rule.load then
        rule.load(s)
      end
      rule.at(s)
      local allowed, ru, rn, sn
      if n == 0 then
        allowed, rem, ru, rn, su, sn = rule.judge(s, 1, true)
      else
        allowed, rem, ru, rn, su, sn = rule.judge(s, n, false)
        if allowed == 1 then
          rule.charge(s, n)
        end
      end
      local h = o + 1
      local head = rem * 8 + allowed
      out[h] = head
      o = h
      if s.t ~= last then
        head = head + 2
        o = o + 1
        out[o] = s.t
        last = s.t
      end
      o = o + 1
      out[o] = su
      if sn ~= 0 then
        head = head + 4
        o = o + 1
        out[o] = sn
      end
      if allowed == 0 then
        out[o + 1] = ru
        out[o + 2] = rn
        o = o + 2
      end
      out[h] = head
    end
  end
  for i = 1, #opened do
    local s = opened[i]
    s.q.rule.flush(s)
  end
  return out
end

------------------------------------------------------------------------------------------
-- all: KEYS, a state hash and a sorted set per limit (all in one slot);
-- ARGV: op, the time in µs ("" = the server's TIME), then 12 per limit: the quota (8
-- numbers), n, back, ticket_u, ticket_n, need.
-- ops: check (all limits charged or none), peek, refund (n), release (give back `back`
-- units charged at the ticket), lease (release, then charge up to n if at least `need`
-- fits).
-- Reply: the time judged at (µs), then 10 per limit: allowed, remaining, retry (µs, ns),
-- reset (µs, ns), ticket (µs or bucket, ns), extra (freed or granted), lease validity (µs).
------------------------------------------------------------------------------------------
local function all(keys, args)
  local op = args[1]
  if args[2] == '' then
    now = server_time()
  else
    now = tonumber(args[2])
  end
  local M = (#args - 2) / 13
  local limits, a = {}, {}
  for i = 1, M do
    local o = 2 + (i - 1) * 13
    local q = quota(args, o)
    local s = q.rule.open(keys[2 * i - 1], keys[2 * i], q)
    q.rule.at(s)
    limits[i] = s
    a[i] = { n = tonumber(args[o + 9]), back = tonumber(args[o + 10]), tu = tonumber(args[o + 11]),
      tn = tonumber(args[o + 12]), need = tonumber(args[o + 13]) }
  end

  local out = { limits[1].t }
  local function emit(s, extra, valid, allowed, rem, ru, rn, su, sn)
    for _, x in ipairs({ allowed, rem, ru, rn, su, sn, s.ticket_u, s.ticket_n, extra, valid }) do
      out[#out + 1] = x
    end
  end

  if op == 'refund' then
    for i = 1, M do
      local s = limits[i]
      local freed = s.q.rule.refund(s, a[i].n)
      emit(s, freed, 0, s.q.rule.judge(s, 1, true))
    end
  elseif op == 'release' then
    for i = 1, M do
      local s = limits[i]
      s.q.rule.release(s, a[i].back, a[i].tu, a[i].tn)
      emit(s, 0, 0, s.q.rule.judge(s, 1, true))
    end
  elseif op == 'peek' then
    for i = 1, M do
      local s = limits[i]
      emit(s, 0, 0, s.q.rule.judge(s, a[i].n, true))
    end
  elseif op == 'lease' then
    -- One limit: give back what the previous lease left, then take up to n, if `need` fits.
    local s, x = limits[1], a[1]
    local rule = s.q.rule
    rule.release(s, x.back, x.tu, x.tn)
    local _, room = rule.judge(s, 1, true)
    local k = math.min(x.n, room)
    if k < x.need then
      emit(s, 0, 0, rule.judge(s, x.need, true))
    else
      local allowed, rem, ru, rn, su, sn = rule.judge(s, k, false)
      rule.charge(s, k)
      emit(s, k, rule.valid(s), allowed, rem, ru, rn, su, sn)
    end
  else
    -- check: judge every limit; charge all if all admit, none otherwise.
    local ds, admit = {}, true
    for i = 1, M do
      local s = limits[i]
      ds[i] = { s.q.rule.judge(s, a[i].n, false) }
      if ds[i][1] == 0 then
        admit = false
      end
    end
    for i = 1, M do
      local s = limits[i]
      if admit then
        s.q.rule.charge(s, a[i].n)
      elseif ds[i][1] == 1 then
        ds[i] = { s.q.rule.judge(s, a[i].n, true) }
      end
      emit(s, 0, 0, unpack(ds[i]))
    end
  end
  for i = 1, M do
    limits[i].q.rule.flush(limits[i])
  end
  return out
end
