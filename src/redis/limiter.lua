-- slidegate's decision script: the second implementation of every algorithm's rule (the
-- first is the crate's Rust; `tests/redis_conformance.rs` holds both to one reference model).
-- One call reads, decides and writes atomically for one or several limits.
--
-- KEYS: two per limit, sharing one hash tag: the state hash and the sorted set (bucket
-- snapshots for the counter, entries for the exact log; unused by GCRA).
-- ARGV: op, now ("" = the server's TIME, else microseconds: the test-time mode), the TTL slack
-- in milliseconds, then 12 per limit:
--   mode (0 Strict, 1 Weighted, 2 fixed window, 3 exact log, 4 GCRA), L, W (µs), G (µs),
--   N, Tu, Tr (GCRA's interval T = Tu µs + Tr ns), n, back, ticket_u, ticket_n, need.
-- ops: check (all limits charged or none), peek, refund (n), release (give back `back` units
-- charged at the ticket), lease (release, then charge up to n if at least `need` fits).
-- Reply: the time judged at (µs), then 10 per limit: allowed, remaining, retry (µs, ns),
-- reset (µs, ns), ticket (µs or bucket, ns), extra (freed or granted), lease validity (µs).
--
-- Numbers are doubles: every value is an integer below 2^53 (times in µs since the epoch,
-- counts, bucket indices); durations with nanoseconds are (µs, ns) pairs; products that can
-- pass 2^52 go through `muldivmod`. See docs/redis.md for the ranges.

local op = ARGV[1]
local now
if ARGV[2] == '' then
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
else
  now = tonumber(ARGV[2])
end

-- The fast path, before any function is defined (Lua makes a closure of each definition it
-- runs, on every call): one counter limit, a check, in a bucket already written, with the
-- window's start in the hash's cache (see `counter`), admitted. It reads the hash and writes
-- one field; anything else falls through to the general code below, which decides the same.
if op == 'check' and #ARGV == 15 and ARGV[4] ~= '3' and ARGV[4] ~= '4' then
  local H, G = KEYS[1], tonumber(ARGV[7])
  local v = redis.call('HMGET', H, 'k', 'c', 'f', 'fl', 'pb', 'cb', 'cs', 'cb2', 'cs2')
  if v[1] == 'c' .. ARGV[7] and v[6] then
    local c, f, fl = tonumber(v[2]), tonumber(v[3]), tonumber(v[4] or '0')
    local b = math.floor(now / G)
    local r = now - b * G
    if r < 0 then
      b, r = b - 1, r + G
    elseif r >= G then
      b, r = b + 1, r - G
    end
    if b == f then
      local mode, L, N, n = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[8]), tonumber(ARGV[11])
      local pb, cb, cs, cb2, cs2 = tonumber(v[5]), tonumber(v[6]), tonumber(v[7]), tonumber(v[8]), tonumber(v[9])
      -- The first cost counted: bucket b − N (the fixed window: b alone, N = 1).
      local x = b - N
      if mode == '2' then
        x = b
      end
      local s0, s1
      if pb < x and x <= cb then
        s0 = cs
      elseif cb2 >= 0 and cb < x and x <= cb2 then
        s0 = cs2
      end
      local used
      if s0 then
        used = c - math.max(s0, fl)
        if mode == '1' then
          -- Weighted: the oldest bucket, b − N, weighed by (G − r) / G, rounded up.
          local x1 = x + 1
          if x1 > f then
            s1 = c
          elseif pb < x1 and x1 <= cb then
            s1 = cs
          elseif cb2 >= 0 and cb < x1 and x1 <= cb2 then
            s1 = cs2
          end
          local p
          if s1 then
            local rest = math.min(c - math.max(s1, fl), used)
            p = (used - rest) * (G - r)
            if p < 4503599627370496 then
              local q = math.floor(p / G)
              local rm = p - q * G
              if rm < 0 then
                q, rm = q - 1, rm + G
              elseif rm >= G then
                q, rm = q + 1, rm - G
              end
              if rm > 0 then
                q = q + 1
              end
              used = rest + q
            else
              used = nil
            end
          else
            used = nil
          end
        end
      end
      if used and used + n <= L then
        redis.call('HSET', H, 'c', c + n)
        local reset = (N + 1) * G - r
        if mode == '2' then
          reset = G - r
        end
        return { now, 1, L - used - n, 0, 0, reset, 0, b, 0, 0, 0 }
      end
    end
  end
end

local slack = tonumber(ARGV[3])
local M = (#ARGV - 3) / 12

local function fmt(x)
  return string.format('%.0f', x)
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

-- Milliseconds a key must outlive `us` microseconds from now, plus the slack.
local function ttl(us)
  return fmt(math.floor(us / 1000) + 1 + slack)
end

-- Every limit: a table with judge(n, peek) -> decision, charge(n), refund(n),
-- release(back, ticket_u, ticket_n), lease_valid() and ticket.
local function decision(allowed, rem, ru, rn, su, sn)
  return { allowed = allowed, remaining = rem, ru = ru, rn = rn, su = su, sn = sn }
end

------------------------------------------------------------------------------------------
-- The sliding-window counter (Strict, Weighted) and the fixed window, as the local ring:
-- `c` counts every unit ever admitted; the sorted set holds, for each bucket that admitted
-- something, the snapshot of `c` when that bucket started (score: the bucket index, member:
-- "snapshot:bucket"); `fl` is a floor every snapshot is raised to (refunds). The cost in
-- buckets x ..= b is c − snapshot(x), where snapshot(x) is that of the first bucket ≥ x
-- that admitted something (c if none): O(log n) whatever N is, and nothing is ever swept.
------------------------------------------------------------------------------------------
local function counter(H, Z, mode, L, G, N, kind)
  local self = {}
  local v = redis.call('HMGET', H, 'k', 'c', 'f', 'fl', 'pb', 'cb', 'cs', 'cb2', 'cs2')
  local c, f, fl = 0, -1, 0
  -- The lookup cache (see `snapshot`): pb < x ≤ cb reads cs, cb < x ≤ cb2 reads cs2; -1 for
  -- none.
  local pb, cb, cs, cb2, cs2 = -1, -1, 0, -1, 0
  local fresh = v[1] ~= kind
  if fresh then
    if v[1] then
      redis.call('DEL', H, Z)
    end
  else
    c, f, fl = tonumber(v[2]), tonumber(v[3]), tonumber(v[4] or '0')
    if v[6] then
      pb, cb, cs, cb2, cs2 = tonumber(v[5]), tonumber(v[6]), tonumber(v[7]), tonumber(v[8]), tonumber(v[9])
    end
  end
  local cached = false
  local b, r = idiv(now, G)
  local t = now
  if b < f then
    -- A clock older than the newest bucket seen: judged at that bucket's start.
    b, r, t = f, 0, f * G
  end
  self.ticket_u, self.ticket_n = b, 0
  self.t = t

  local function member_snapshot(m)
    return tonumber(string.match(m, '^(%d+):'))
  end
  -- The snapshot of the first bucket ≥ x that admitted something (c if none), raised to the
  -- floor. The two at the start of the window, read by every decision, are kept in the hash
  -- (pb, cb, cs, cb2, cs2), valid because buckets are only ever written past the newest: a
  -- decision then reads the hash and writes it, and the sorted set only when the window's
  -- start passes a cached bucket.
  local function snapshot(x)
    if x > f then
      return c
    end
    local s
    if cb >= 0 and pb < x and x <= cb then
      s = cs
    elseif cb2 >= 0 and cb < x and x <= cb2 then
      s = cs2
    elseif x <= b - N + 1 then
      local e = redis.call('ZRANGEBYSCORE', Z, x, '+inf', 'WITHSCORES', 'LIMIT', 0, 2)
      if e[1] then
        pb, cb, cs = x - 1, tonumber(e[2]), member_snapshot(e[1])
        if e[3] then
          cb2, cs2 = tonumber(e[4]), member_snapshot(e[3])
        else
          cb2, cs2 = -1, 0
        end
        cached = true
        s = cs
      else
        s = c
      end
    else
      local e = redis.call('ZRANGEBYSCORE', Z, x, '+inf', 'LIMIT', 0, 1)
      s = e[1] and member_snapshot(e[1]) or c
    end
    if s < fl then
      s = fl
    end
    return s
  end
  local memo = {}
  -- tail(j): the cost in buckets b − N + j ..= b, 0 ≤ j ≤ N + 1.
  local function tail(j)
    if j > N then
      return 0
    end
    local m = memo[j]
    if m == nil then
      m = c - snapshot(b - N + j)
      memo[j] = m
    end
    return m
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
  local function newest()
    if tail(N) > 0 then
      return N + 1
    end
    return first_false(0, N, function(j)
      return tail(j) > 0
    end)
  end
  -- Microseconds from offset r of bucket b to the start of bucket b + j.
  local function after(j)
    local a = j * G - r
    if a < 0 then
      return 0
    end
    return a
  end
  local span = (N + 1) * G

  local function weighted_used()
    local all, rest = tail(0), tail(1)
    if rest > all then
      rest = all
    end
    local oldest = all - rest
    local q, rm = muldivmod(oldest, G - r, G)
    if rm > 0 then
      q = q + 1
    end
    return rest + q
  end

  function self.judge(n, peek)
    if mode == 2 then
      local used = tail(N)
      local nxt = G - r
      if used + n > L then
        return decision(0, math.max(L - used, 0), nxt, 0, nxt, 0)
      end
      local charged = peek and 0 or n
      local reset = (used + charged > 0) and nxt or 0
      return decision(1, L - used - charged, 0, 0, reset, 0)
    end
    local used
    if mode == 1 then
      used = weighted_used()
    else
      used = tail(0)
    end
    if used + n <= L then
      if peek then
        return decision(1, L - used, 0, 0, after(newest()), 0)
      end
      return decision(1, L - used - n, 0, 0, span - r, 0)
    end
    local nw = newest()
    local reset = after(nw)
    local rem = math.max(L - used, 0)
    if mode == 0 then
      local j = first_false(1, nw, function(x)
        return tail(x) + n > L
      end)
      return decision(0, rem, after(j), 0, reset, 0)
    end
    -- Weighted: in bucket b + j the oldest bucket holds C_j = tail(j) − tail(j + 1) and the
    -- rest S_j = tail(j + 1); with A_j = L − n − S_j ≥ 0 the request fits from offset
    -- G − ⌊A_j·G / C_j⌋ on (in ns: G is whole µs, the offset need not be).
    local first = first_false(0, math.max(nw - 1, 0), function(x)
      return tail(x + 1) + n > L
    end)
    for j = first, N do
      local rest = tail(j + 1)
      local oldest = tail(j) - math.min(rest, tail(j))
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
          return decision(0, rem, au, an, reset, 0)
        end
      end
    end
    return decision(0, rem, span - r, 0, reset, 0)
  end

  local function store(fields)
    if fresh then
      table.insert(fields, 'k')
      table.insert(fields, kind)
      fresh = false
    end
    if cached then
      for _, x in ipairs({ 'pb', pb, 'cb', cb, 'cs', cs, 'cb2', cb2, 'cs2', cs2 }) do
        table.insert(fields, x)
      end
      cached = false
    end
    if #fields > 0 then
      redis.call('HSET', H, unpack(fields))
    end
  end

  function self.charge(n)
    local fields = { 'c', c + n }
    if b > f then
      redis.call('ZADD', Z, b, fmt(c) .. ':' .. fmt(b))
      redis.call('ZREMRANGEBYSCORE', Z, '-inf', '(' .. fmt(b - N))
      table.insert(fields, 'f')
      table.insert(fields, b)
      -- The cache must see the new bucket if it ends before it.
      if cb < 0 then
        pb, cb, cs, cb2, cs2 = f, b, c, -1, 0
        cached = true
      elseif cb2 < 0 then
        cb2, cs2 = b, c
        cached = true
      end
      f = b
      store(fields)
      -- Everything in bucket b has left every window when bucket b + N + 1 starts.
      local ms = ttl(span - r)
      redis.call('PEXPIRE', H, ms)
      redis.call('PEXPIRE', Z, ms)
    else
      store(fields)
    end
    c = c + n
    memo = {}
  end

  -- Frees up to n of the oldest units the window counts (the current bucket alone for the
  -- fixed window) by raising the floor of every snapshot.
  function self.refund(n)
    local first = (mode == 2) and b or (b - N)
    local s = snapshot(first)
    local take = math.min(n, c - s)
    if take <= 0 then
      return 0
    end
    fl = s + take
    store({ 'fl', fl })
    memo = {}
    return take
  end

  -- Gives back `back` units charged in bucket `bt`: as if they had never been admitted.
  function self.release(back, bt)
    if back <= 0 or fresh or bt < b - N or bt > f then
      return
    end
    local later = redis.call('ZRANGEBYSCORE', Z, '(' .. fmt(bt), '+inf')
    for _, m in ipairs(later) do
      local s, x = string.match(m, '^(%d+):(%d+)$')
      redis.call('ZREM', Z, m)
      redis.call('ZADD', Z, x, fmt(tonumber(s) - back) .. ':' .. x)
    end
    c = c - back
    if fl > c then
      fl = c
    end
    -- Snapshots moved: the cache starts again from the sorted set.
    pb, cb, cs, cb2, cs2, cached = -1, -1, 0, -1, 0, true
    store({ 'c', c, 'fl', fl })
    memo = {}
  end

  function self.lease_valid()
    return G - r
  end

  return self
end

------------------------------------------------------------------------------------------
-- The exact log: `c` units ever admitted, `g` units gone (expired or refunded: always the
-- oldest), `ts` the newest admission's time. The sorted set holds one entry per admission
-- time: score = c after its last unit (its "end"), member = the time. Entries ending at or
-- below g are removed, so the live ones start at rank 0.
------------------------------------------------------------------------------------------
local function log(H, Z, L, W)
  local self = {}
  local v = redis.call('HMGET', H, 'k', 'c', 'g', 'ts')
  local c, g, ts = 0, 0, -1
  local fresh = v[1] ~= 'l'
  if fresh then
    if v[1] then
      redis.call('DEL', H, Z)
    end
  else
    c, g, ts = tonumber(v[2]), tonumber(v[3]), tonumber(v[4])
  end
  local t = math.max(now, ts)
  self.t = t
  self.ticket_u, self.ticket_n = t, 0

  local function entry(rank)
    local e = redis.call('ZRANGE', Z, rank, rank, 'WITHSCORES')
    if e[1] then
      return tonumber(e[1]), tonumber(e[2])
    end
    return nil
  end
  local function expired(rank)
    local at = entry(rank)
    return at ~= nil and at + W <= t
  end
  local function store(fields)
    if fresh then
      table.insert(fields, 'k')
      table.insert(fields, 'l')
      fresh = false
    end
    redis.call('HSET', H, unpack(fields))
  end
  local function trim()
    redis.call('ZREMRANGEBYSCORE', Z, '-inf', fmt(g))
  end
  -- Units that left the window: the entries from rank 0 up to the last expired one.
  if not fresh and g < c and expired(0) then
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
    local _, e = entry(lo)
    g = math.max(g, e)
    redis.call('ZREMRANGEBYRANK', Z, 0, lo)
    store({ 'g', fmt(g) })
  end
  local within = c - g

  function self.judge(n, peek)
    if within + n > L then
      -- The (within + n − L)-th oldest unit must leave.
      local u = g + within + n - L - 1
      local e = redis.call('ZRANGEBYSCORE', Z, '(' .. fmt(u), '+inf', 'LIMIT', 0, 1)
      local retry = tonumber(e[1]) + W - t
      return decision(0, L - within, retry, 0, ts + W - t, 0)
    end
    if peek then
      local reset = 0
      if within > 0 then
        reset = ts + W - t
      end
      return decision(1, L - within, 0, 0, reset, 0)
    end
    return decision(1, L - within - n, 0, 0, W, 0)
  end

  function self.charge(n)
    redis.call('ZADD', Z, fmt(c + n), fmt(t))
    c = c + n
    ts = t
    within = within + n
    store({ 'c', fmt(c), 'ts', fmt(ts), 'g', fmt(g) })
    local ms = ttl(W)
    redis.call('PEXPIRE', H, ms)
    redis.call('PEXPIRE', Z, ms)
  end

  function self.refund(n)
    local take = math.min(n, within)
    if take <= 0 then
      return 0
    end
    g = g + take
    within = within - take
    trim()
    store({ 'g', fmt(g) })
    return take
  end

  -- Gives back `back` units admitted at time `at`: the entry of that time loses them, every
  -- later entry's end moves down by as much.
  function self.release(back, at)
    if back <= 0 or fresh then
      return
    end
    local e = redis.call('ZSCORE', Z, fmt(at))
    if not e then
      return
    end
    local last = tonumber(e)
    local prev = redis.call('ZREVRANGEBYSCORE', Z, '(' .. fmt(last), '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    local start = g
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
    c = c - back
    if g > c then
      g = c
    end
    within = c - g
    local top = redis.call('ZRANGE', Z, -1, -1)
    if top[1] then
      ts = tonumber(top[1])
    end
    store({ 'c', fmt(c), 'g', fmt(g), 'ts', fmt(ts) })
  end

  function self.lease_valid()
    return 0
  end

  return self
end

------------------------------------------------------------------------------------------
-- GCRA: the theoretical arrival time as a (µs, ns) pair in the hash (fields u, n).
------------------------------------------------------------------------------------------
local function gcra(H, Z, L, Tu, Tr)
  local self = {}
  local v = redis.call('HMGET', H, 'k', 'u', 'n')
  local au, an = 0, 0
  local fresh = v[1] ~= 'g'
  if fresh then
    if v[1] then
      redis.call('DEL', H, Z)
    end
  else
    au, an = tonumber(v[2]), tonumber(v[3])
  end
  local tau_u, tau_n = pmul(L, Tu, Tr)
  -- A reading older than the state's newest lower bound, TAT − τ, is judged at that bound.
  local tu, tn = pmax(now, 0, psub(au, an, tau_u, tau_n))
  self.t = tu
  local function units(xu, xn)
    return pdiv(xu, xn, Tu, Tr)
  end
  local function room(xu, xn, nu, nn)
    local top_u, top_n = padd(nu, nn, tau_u, tau_n)
    local bu, bn = pmax(xu, xn, nu, nn)
    return units(ppos(psub(top_u, top_n, bu, bn)))
  end
  local nu, nn = 0, 0

  function self.judge(n, peek)
    local bu, bn = pmax(au, an, tu, tn)
    local cu, cn = pmul(n, Tu, Tr)
    nu, nn = padd(bu, bn, cu, cn)
    local top_u, top_n = padd(tu, tn, tau_u, tau_n)
    local wu, wn = ppos(psub(au, an, tu, tn))
    if not plt(top_u, top_n, nu, nn) then
      if peek then
        return decision(1, units(psub(top_u, top_n, bu, bn)), 0, 0, wu, wn)
      end
      local su, sn = psub(nu, nn, tu, tn)
      return decision(1, units(psub(top_u, top_n, nu, nn)), 0, 0, su, sn)
    end
    local rem = units(ppos(psub(top_u, top_n, bu, bn)))
    local ru, rn = psub(nu, nn, tau_u, tau_n)
    ru, rn = psub(ru, rn, tu, tn)
    return decision(0, rem, ru, rn, wu, wn)
  end

  local function store()
    local fields = { 'u', fmt(au), 'n', fmt(an) }
    if fresh then
      table.insert(fields, 'k')
      table.insert(fields, 'g')
      fresh = false
    end
    redis.call('HSET', H, unpack(fields))
    local wu = psub(au, an, now, 0)
    redis.call('PEXPIRE', H, ttl(math.max(wu + 1, 0)))
  end

  function self.charge(n)
    -- `judge` computed the new TAT.
    au, an = nu, nn
    self.ticket_u, self.ticket_n = au, an
    store()
  end

  function self.refund(n)
    if not plt(now, 0, au, an) then
      return 0
    end
    local cu, cn = pmul(n, Tu, Tr)
    local xu, xn = pmax(now, 0, psub(au, an, cu, cn))
    local freed = room(xu, xn, now, 0) - room(au, an, now, 0)
    au, an = xu, xn
    store()
    return freed
  end

  -- Gives back the part of a charge of `back` that wrote TAT `ticket` and has not drained.
  function self.release(back, bu, bn)
    if back <= 0 or fresh then
      return
    end
    local cu, cn = pmul(back, Tu, Tr)
    local uu, un = ppos(psub(bu, bn, now, 0))
    if plt(cu, cn, uu, un) then
      uu, un = cu, cn
    end
    if uu == 0 and un == 0 then
      return
    end
    au, an = ppos(psub(au, an, uu, un))
    store()
  end

  function self.lease_valid()
    return -1
  end

  self.ticket_u, self.ticket_n = au, an
  return self
end

------------------------------------------------------------------------------------------
local limits, args = {}, {}
for i = 1, M do
  local o = 3 + (i - 1) * 12
  local a = {}
  for k = 1, 12 do
    a[k] = tonumber(ARGV[o + k])
  end
  local mode, L, W, G, N, Tu, Tr = a[1], a[2], a[3], a[4], a[5], a[6], a[7]
  local H, Z = KEYS[2 * i - 1], KEYS[2 * i]
  if mode <= 2 then
    limits[i] = counter(H, Z, mode, L, G, N, 'c' .. ARGV[o + 4])
  elseif mode == 3 then
    limits[i] = log(H, Z, L, W)
  else
    limits[i] = gcra(H, Z, L, Tu, Tr)
  end
  args[i] = a
end

local out = { limits[1].t }
local function emit(lim, d, extra, valid)
  for _, x in ipairs({ d.allowed, d.remaining, d.ru, d.rn, d.su, d.sn, lim.ticket_u, lim.ticket_n, extra, valid }) do
    table.insert(out, x)
  end
end

if op == 'refund' then
  for i = 1, M do
    local freed = limits[i].refund(args[i][8])
    emit(limits[i], limits[i].judge(1, true), freed, 0)
  end
elseif op == 'release' then
  for i = 1, M do
    local a = args[i]
    limits[i].release(a[9], a[10], a[11])
    emit(limits[i], limits[i].judge(1, true), 0, 0)
  end
elseif op == 'peek' then
  for i = 1, M do
    emit(limits[i], limits[i].judge(args[i][8], true), 0, 0)
  end
elseif op == 'lease' then
  -- One limit: give back what the previous lease left, then take up to n, if `need` fits.
  local lim, a = limits[1], args[1]
  lim.release(a[9], a[10], a[11])
  local peek = lim.judge(1, true)
  local k = math.min(a[8], peek.remaining)
  if k < a[12] then
    emit(lim, lim.judge(a[12], true), 0, 0)
  else
    local d = lim.judge(k, false)
    lim.charge(k)
    emit(lim, d, k, lim.lease_valid())
  end
else
  -- check: judge every limit; charge all if all admit, none otherwise.
  local ds, all = {}, true
  for i = 1, M do
    ds[i] = limits[i].judge(args[i][8], false)
    if ds[i].allowed == 0 then
      all = false
    end
  end
  for i = 1, M do
    if all then
      limits[i].charge(args[i][8])
    elseif ds[i].allowed == 1 then
      ds[i] = limits[i].judge(args[i][8], true)
    end
    emit(limits[i], ds[i], 0, 0)
  end
end
return out
