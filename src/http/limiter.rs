//! What the layer enforces: limiters behind one small async trait, named policies, and
//! several policies checked all or nothing.

use core::future::{Future, ready};
use core::hash::{BuildHasher, Hash};
use core::time::Duration;
use std::sync::Arc;

use http::StatusCode;

use crate::clock::Clock;
use crate::http::headers::{Meta, sf_string};
use crate::http::key::{Global, KeyError, KeyExtractor, RequestHead};
use crate::{CostError, Decision, KeyedLimiter, Limit, Quota, SlidingWindow, check_all};

/// A limiter the HTTP layer can enforce: one decision per key and cost, awaited.
///
/// Implemented by [`SlidingWindow`] (key `()`), [`KeyedLimiter`] (its key type) and an
/// [`Arc`] of either; a distributed backend implements it with a future that does its round
/// trip. The layer awaits the decision, so a slow backend delays only its own request.
/// Several policies checked together, all or nothing, are an [`All`] of [`Policy`]s.
pub trait Limiter: Send + Sync + 'static {
    /// What requests are told apart by (`()` for one limit shared by all).
    type Key: Send + Sync + 'static;

    /// Checks and, if allowed, charges `cost` to `key`.
    fn check(
        &self,
        key: &Self::Key,
        cost: u64,
    ) -> impl Future<Output = Result<Checked, LimiterError>> + Send;

    /// The decision now, if this limiter can make it without waiting: the layer then
    /// answers without allocating a future for the request. In-process limiters always can;
    /// the default, `None`, has the layer await [`Limiter::check`].
    fn check_now(&self, key: &Self::Key, cost: u64) -> Option<Result<Checked, LimiterError>> {
        let _ = (key, cost);
        None
    }

    /// The quota `key` is checked against (for the `RateLimit-Policy` field).
    fn quota(&self, key: &Self::Key) -> Quota;
}

/// A [`Limiter`]'s answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    /// The decision.
    pub decision: Decision,
    /// Whether a fallback made it (a backend that could not be reached and answered from a
    /// local quota instead): counted as degraded by the layer.
    pub degraded: bool,
}

impl From<Decision> for Checked {
    fn from(decision: Decision) -> Self {
        Checked {
            decision,
            degraded: false,
        }
    }
}

/// Why a [`Limiter`] gave no decision.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LimiterError {
    /// The cost can never be checked against the limit (zero, or above the limit).
    #[error(transparent)]
    Cost(#[from] CostError),
    /// The backend could not decide (unreachable, too slow, misbehaving).
    #[error("limiter unavailable: {0}")]
    Unavailable(Box<dyn std::error::Error + Send + Sync>),
}

impl<C: Clock + 'static> Limiter for SlidingWindow<C> {
    type Key = ();

    fn check(
        &self,
        _: &(),
        cost: u64,
    ) -> impl Future<Output = Result<Checked, LimiterError>> + Send {
        ready(self.check_n(cost).map(Checked::from).map_err(Into::into))
    }

    fn check_now(&self, _: &(), cost: u64) -> Option<Result<Checked, LimiterError>> {
        Some(self.check_n(cost).map(Checked::from).map_err(Into::into))
    }

    fn quota(&self, _: &()) -> Quota {
        SlidingWindow::quota(self)
    }
}

impl<K, C, S> Limiter for KeyedLimiter<K, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    type Key = K;

    fn check(
        &self,
        key: &K,
        cost: u64,
    ) -> impl Future<Output = Result<Checked, LimiterError>> + Send {
        ready(
            self.check_n(key, cost)
                .map(Checked::from)
                .map_err(Into::into),
        )
    }

    #[inline]
    fn check_now(&self, key: &K, cost: u64) -> Option<Result<Checked, LimiterError>> {
        // A cost of 1 is valid under every quota: the check returns its bare decision, with
        // no `Result` around it to take apart.
        if cost == 1 {
            return Some(Ok(self.check(key).into()));
        }
        Some(
            self.check_n(key, cost)
                .map(Checked::from)
                .map_err(Into::into),
        )
    }

    fn quota(&self, key: &K) -> Quota {
        KeyedLimiter::quota(self, key)
    }
}

impl<L: Limiter> Limiter for Arc<L> {
    type Key = L::Key;

    fn check(
        &self,
        key: &Self::Key,
        cost: u64,
    ) -> impl Future<Output = Result<Checked, LimiterError>> + Send {
        (**self).check(key, cost)
    }

    fn check_now(&self, key: &Self::Key, cost: u64) -> Option<Result<Checked, LimiterError>> {
        (**self).check_now(key, cost)
    }

    fn quota(&self, key: &Self::Key) -> Quota {
        (**self).quota(key)
    }
}

/// An in-process limiter, which [`All`] checks together with others through
/// [`check_all`]: [`SlidingWindow`], [`KeyedLimiter`], and an [`Arc`] of either.
pub trait LocalLimiter: Limiter + sealed::Local {}

impl<C: Clock + 'static> LocalLimiter for SlidingWindow<C> {}
impl<K, C, S> LocalLimiter for KeyedLimiter<K, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
}
impl<L: LocalLimiter> LocalLimiter for Arc<L> {}

pub(crate) mod sealed {
    use super::*;

    /// How an in-process limiter takes part in a [`check_all`].
    pub trait Local: super::Limiter {
        /// The [`Limit`] this limiter is for one key.
        type Handle<'a>
        where
            Self: 'a;
        fn handle<'a>(&'a self, key: &'a Self::Key) -> Self::Handle<'a>;
        fn as_limit<'s>(handle: &'s Self::Handle<'_>) -> &'s dyn Limit;
        /// What the key has left now, without charging.
        fn peek(&self, key: &Self::Key) -> Decision;
    }

    impl<C: Clock + 'static> Local for SlidingWindow<C> {
        type Handle<'a> = &'a SlidingWindow<C>;
        fn handle<'a>(&'a self, _: &'a ()) -> &'a SlidingWindow<C> {
            self
        }
        fn as_limit<'s>(handle: &'s &SlidingWindow<C>) -> &'s dyn Limit {
            *handle
        }
        fn peek(&self, _: &()) -> Decision {
            SlidingWindow::peek(self)
        }
    }

    impl<K, C, S> Local for KeyedLimiter<K, C, S>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
        C: Clock + 'static,
        S: BuildHasher + Clone + Send + Sync + 'static,
    {
        type Handle<'a> = crate::KeyLimit<'a, K, C, S>;
        fn handle<'a>(&'a self, key: &'a K) -> Self::Handle<'a> {
            self.key(key)
        }
        fn as_limit<'s>(handle: &'s Self::Handle<'_>) -> &'s dyn Limit {
            handle
        }
        fn peek(&self, key: &K) -> Decision {
            KeyedLimiter::peek(self, key)
        }
    }

    impl<L: Local> Local for Arc<L> {
        type Handle<'a> = L::Handle<'a>;
        fn handle<'a>(&'a self, key: &'a Self::Key) -> Self::Handle<'a> {
            (**self).handle(key)
        }
        fn as_limit<'s>(handle: &'s Self::Handle<'_>) -> &'s dyn Limit {
            L::as_limit(handle)
        }
        fn peek(&self, key: &Self::Key) -> Decision {
            (**self).peek(key)
        }
    }

    /// A request denied because a policy's key could not be extracted.
    #[derive(Clone, Copy, Debug)]
    pub struct Refused {
        pub(crate) status: StatusCode,
    }

    /// One policy's state after a request, for the header fields.
    #[derive(Clone, Debug)]
    pub struct Report {
        pub(crate) limit: u64,
        pub(crate) window: Duration,
        pub(crate) remaining: u64,
        /// `t`: the window's reset when allowed, the wait when this policy bound a denial.
        pub(crate) reset: Duration,
        pub(crate) partition: Option<Vec<u8>>,
    }

    /// The answer for one request across its policies.
    #[derive(Clone, Debug)]
    pub struct Verdict {
        /// The policy that denied the request, if one did.
        pub(crate) denied_by: Option<usize>,
        pub(crate) retry_after: Duration,
        /// Per policy, in order; `None` for one the request had no key for. A single `None`
        /// for an admitted request checked without `fields`: no header field is written.
        pub(crate) reports: Reports,
        pub(crate) degraded: bool,
    }

    /// Per policy, in order; `None` for one the request had no key for. One policy's is
    /// kept inline, so a request under a single policy allocates no list.
    #[derive(Clone, Debug)]
    pub enum Reports {
        One(Option<Report>),
        Many(Vec<Option<Report>>),
    }

    impl core::ops::Deref for Reports {
        type Target = [Option<Report>];

        fn deref(&self) -> &[Option<Report>] {
            match self {
                Reports::One(report) => core::slice::from_ref(report),
                Reports::Many(reports) => reports,
            }
        }
    }

    impl Verdict {
        /// The verdict of a single policy that let the request pass unkeyed.
        pub(crate) fn unkeyed() -> Self {
            Verdict {
                denied_by: None,
                retry_after: Duration::ZERO,
                reports: Reports::One(None),
                degraded: false,
            }
        }
    }

    /// A tuple of policies an [`All`] checks together.
    pub trait Tuple: Send + Sync + 'static {
        type Keys: Send + Sync + 'static;
        fn metas(&self) -> Vec<Meta>;
        fn extract(
            &self,
            head: &RequestHead<'_>,
            degraded: &mut bool,
        ) -> Result<Self::Keys, Refused>;
        fn decide(
            &self,
            keys: &Self::Keys,
            cost: u64,
            len: usize,
            fields: bool,
        ) -> Result<Verdict, LimiterError>;
    }

    /// What the layer needs of the policies it enforces.
    pub trait Enforce: Send + Sync + 'static {
        /// One request's keys, one per policy (`None`: the policy lets the request pass).
        type Keys: Send + Sync + 'static;
        /// The policies, in order.
        fn metas(&self) -> &[Meta];
        /// Extracts every policy's key; `Err` when a policy's missing key denies the request.
        /// Sets `degraded` when a policy's key was missing (counted once per request).
        fn extract(
            &self,
            head: &RequestHead<'_>,
            degraded: &mut bool,
        ) -> Result<Self::Keys, Refused>;
        /// The verdict now, if every limiter can give it without waiting. With `fields`
        /// false, an admitted request's verdict carries no reports (no header fields will be
        /// written for it, so the quotas and partition keys are not looked up).
        fn check_now(
            &self,
            keys: &Self::Keys,
            cost: u64,
            fields: bool,
        ) -> Option<Result<Verdict, LimiterError>>;
        /// Extracts every policy's key and decides now if every limiter can: the layer's
        /// path for in-process limiters, in one step. A request every policy admits
        /// without a fallback is [`Now::Admitted`], with no verdict built for it. Sets
        /// `degraded` as `extract` does.
        #[inline(always)]
        fn decide_now(
            &self,
            head: &RequestHead<'_>,
            cost: u64,
            fields: bool,
            degraded: &mut bool,
        ) -> Now<Self::Keys> {
            let keys = match self.extract(head, degraded) {
                Ok(keys) => keys,
                Err(refused) => return Now::Refused(refused.status),
            };
            match self.check_now(&keys, cost, fields) {
                Some(Ok(verdict)) if verdict.denied_by.is_none() && !verdict.degraded => {
                    if fields {
                        Now::Reported(verdict.reports)
                    } else {
                        Now::Admitted
                    }
                }
                Some(verdict) => Now::Decided(verdict),
                None => Now::Wait(keys),
            }
        }

        /// Checks `cost` against every policy that has a key, all or nothing; `fields` as for
        /// `check_now`.
        fn check<'a>(
            &'a self,
            keys: &'a Self::Keys,
            cost: u64,
            fields: bool,
        ) -> impl Future<Output = Result<Verdict, LimiterError>> + Send + 'a;
    }

    /// A request's outcome from [`Enforce::decide_now`].
    pub enum Now<K> {
        /// Every policy admitted it, none by a fallback, and the layer asked for no reports
        /// (`fields` false).
        Admitted,
        /// Every policy admitted it, none by a fallback: each policy's report.
        Reported(Reports),
        /// The policies' verdict, or the limiter's error.
        Decided(Result<Verdict, LimiterError>),
        /// A limiter must be awaited: [`Enforce::check`] these keys.
        Wait(K),
        /// A policy's missing key denies the request with this status.
        Refused(StatusCode),
    }
}

pub(crate) use sealed::{Now, Refused, Report, Reports, Verdict};

/// The policies a [`RateLimitLayer`](crate::http::RateLimitLayer) enforces: one [`Policy`],
/// or an [`All`] of several.
pub trait Policies: sealed::Enforce {}

/// What the layer does for a request whose key a policy cannot extract (a missing header or
/// extension, no peer address, an extractor that panicked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnMissingKey<K> {
    /// Answer with this status (the default: `500 Internal Server Error`, since a key that
    /// cannot be found is a deployment fault, not the client's).
    Deny(StatusCode),
    /// This policy lets the request pass (the layer's other policies still apply).
    Allow,
    /// Check the request against this key instead (one shared budget for all such requests).
    Key(K),
}

impl<K> Default for OnMissingKey<K> {
    fn default() -> Self {
        OnMissingKey::Deny(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

/// Turns a key into the bytes of the `pk` (partition key) parameter.
type PartitionFn<K> = Arc<dyn Fn(&K) -> Vec<u8> + Send + Sync>;

/// A named limit with the extractor that keys requests for it.
///
/// ```
/// use slidegate::http::{key::ClientIp, Policy};
/// use slidegate::{KeyedLimiter, Quota};
/// use std::time::Duration;
///
/// let per_ip = KeyedLimiter::new(Quota::new(100, Duration::from_secs(60))?);
/// let policy = Policy::new("per-ip", per_ip)?.key(ClientIp::new());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Policy<L: Limiter, X = Global> {
    pub(crate) meta: [Meta; 1],
    pub(crate) limiter: L,
    pub(crate) extractor: X,
    pub(crate) on_missing: OnMissingKey<L::Key>,
    pub(crate) partition: Option<PartitionFn<L::Key>>,
}

/// A policy name that cannot be written in a header field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyNameError(pub(crate) String);

impl<L: Limiter> Policy<L, Global> {
    /// A policy named `name` (printable ASCII: it is written in the `RateLimit` fields and
    /// used as a metric label) over `limiter`, keyed by [`Global`] until [`Policy::key`]
    /// says otherwise.
    pub fn new(name: &str, limiter: L) -> Result<Self, PolicyNameError> {
        let field = sf_string(name).map_err(PolicyNameError)?;
        Ok(Policy {
            meta: [Meta {
                field,
                name: name.into(),
            }],
            limiter,
            extractor: Global,
            on_missing: OnMissingKey::default(),
            partition: None,
        })
    }
}

impl<L: Limiter, X> Policy<L, X> {
    /// Keys requests with `extractor`.
    pub fn key<X2: KeyExtractor<Key = L::Key>>(self, extractor: X2) -> Policy<L, X2> {
        Policy {
            meta: self.meta,
            limiter: self.limiter,
            extractor,
            on_missing: self.on_missing,
            partition: self.partition,
        }
    }

    /// What to do when the key cannot be extracted (default: deny with 500).
    pub fn on_missing_key(mut self, outcome: OnMissingKey<L::Key>) -> Self {
        self.on_missing = outcome;
        self
    }

    /// Adds the `pk` (partition key) parameter to this policy's header items: `f` turns the
    /// request's key into the bytes sent (base64-encoded). The draft asks that it reveal
    /// nothing sensitive; a hash or an identifier the client already knows is the usual
    /// choice.
    pub fn partition_key(mut self, f: impl Fn(&L::Key) -> Vec<u8> + Send + Sync + 'static) -> Self {
        self.partition = Some(Arc::new(f));
        self
    }

    /// The limiter.
    pub fn limiter(&self) -> &L {
        &self.limiter
    }

    /// The extractor's key for `head` after the missing-key outcome: `Ok(None)` when the
    /// policy lets the request pass unkeyed.
    #[inline(always)]
    fn extract_key(
        &self,
        head: &RequestHead<'_>,
        degraded: &mut bool,
    ) -> Result<Option<L::Key>, Refused>
    where
        X: KeyExtractor<Key = L::Key>,
        L::Key: Clone,
    {
        // An extractor is the caller's code: a panic in it is a missing key, not a dropped
        // connection.
        let extracted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.extractor.extract(head)
        }));
        let error = match extracted {
            Ok(Ok(key)) => return Ok(Some(key)),
            Ok(Err(e)) => e,
            Err(_) => KeyError::Panicked,
        };
        self.missing_key(&error, degraded)
    }

    /// The outcome for a request whose key was not extracted (out of line: the common path
    /// stays small enough to inline into the layer's call).
    #[cold]
    #[inline(never)]
    fn missing_key(&self, error: &KeyError, degraded: &mut bool) -> Result<Option<L::Key>, Refused>
    where
        L::Key: Clone,
    {
        crate::http::telemetry::key_missing(&self.meta[0].name, error);
        *degraded = true;
        match &self.on_missing {
            OnMissingKey::Deny(status) => Err(Refused { status: *status }),
            OnMissingKey::Allow => Ok(None),
            OnMissingKey::Key(key) => Ok(Some(key.clone())),
        }
    }

    /// The verdict of this policy alone; its report only for a denial or when `fields`.
    #[inline(always)]
    fn verdict(&self, key: &L::Key, checked: Checked, fields: bool) -> Verdict {
        let d = checked.decision;
        let (denied_by, retry_after, reset) = match d.retry_after() {
            None => (None, Duration::ZERO, d.reset_after()),
            Some(wait) => (Some(0), wait, wait),
        };
        let report = (fields || denied_by.is_some()).then(|| self.report(key, &d, reset));
        Verdict {
            denied_by,
            retry_after,
            reports: Reports::One(report),
            degraded: checked.degraded,
        }
    }

    fn report(&self, key: &L::Key, decision: &Decision, reset: Duration) -> Report {
        Report {
            limit: decision.limit(),
            window: self.limiter.quota(key).window(),
            remaining: decision.remaining(),
            reset,
            partition: self.partition.as_ref().map(|f| f(key)),
        }
    }
}

impl<L, X> core::fmt::Debug for Policy<L, X>
where
    L: Limiter + core::fmt::Debug,
    X: core::fmt::Debug,
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Policy")
            .field("name", &self.meta[0].name)
            .field("limiter", &self.limiter)
            .field("extractor", &self.extractor)
            .finish_non_exhaustive()
    }
}

impl<L, X> sealed::Enforce for Policy<L, X>
where
    L: Limiter,
    L::Key: Clone,
    X: KeyExtractor<Key = L::Key>,
{
    type Keys = Option<L::Key>;

    fn metas(&self) -> &[Meta] {
        &self.meta
    }

    fn extract(&self, head: &RequestHead<'_>, degraded: &mut bool) -> Result<Self::Keys, Refused> {
        self.extract_key(head, degraded)
    }

    #[inline(always)]
    fn decide_now(
        &self,
        head: &RequestHead<'_>,
        cost: u64,
        fields: bool,
        degraded: &mut bool,
    ) -> Now<Option<L::Key>> {
        let key = match self.extract_key(head, degraded) {
            Ok(key) => key,
            Err(refused) => return Now::Refused(refused.status),
        };
        let Some(k) = &key else {
            return Now::Decided(Ok(Verdict::unkeyed()));
        };
        match self.limiter.check_now(k, cost) {
            None => Now::Wait(key),
            Some(Ok(checked)) if checked.decision.is_allowed() && !checked.degraded => {
                if !fields {
                    return Now::Admitted;
                }
                let d = checked.decision;
                Now::Reported(Reports::One(Some(self.report(k, &d, d.reset_after()))))
            }
            Some(checked) => Now::Decided(checked.map(|checked| self.verdict(k, checked, fields))),
        }
    }

    fn check_now(
        &self,
        key: &Option<L::Key>,
        cost: u64,
        fields: bool,
    ) -> Option<Result<Verdict, LimiterError>> {
        let Some(key) = key else {
            return Some(Ok(Verdict::unkeyed()));
        };
        let checked = self.limiter.check_now(key, cost)?;
        Some(checked.map(|checked| self.verdict(key, checked, fields)))
    }

    async fn check<'a>(
        &'a self,
        key: &'a Option<L::Key>,
        cost: u64,
        fields: bool,
    ) -> Result<Verdict, LimiterError> {
        let Some(key) = key else {
            return Ok(Verdict::unkeyed());
        };
        let checked = self.limiter.check(key, cost).await?;
        Ok(self.verdict(key, checked, fields))
    }
}

impl<L, X> Policies for Policy<L, X>
where
    L: Limiter,
    L::Key: Clone,
    X: KeyExtractor<Key = L::Key>,
{
}

/// Several policies checked together, all or nothing, through [`check_all`]: a request is
/// admitted only if every policy admits it, and a denied request is charged to none. `All`
/// takes a tuple of two to six [`Policy`]s over in-process limiters ([`LocalLimiter`]);
/// list the widest first (see [`check_all`] on the order).
///
/// ```
/// use slidegate::http::{key::{ClientIp, Header}, All, Policy};
/// use slidegate::{KeyedLimiter, Quota, SlidingWindow};
/// use std::time::Duration;
///
/// let q = |n, s| Quota::new(n, Duration::from_secs(s));
/// let policies = All::new((
///     Policy::new("global", SlidingWindow::new(q(10_000, 1)?))?,
///     Policy::new("per-ip", KeyedLimiter::new(q(100, 60)?))?.key(ClientIp::new()),
///     Policy::new("per-token", KeyedLimiter::new(q(1000, 3600)?))?.key(Header::new("x-api-token")),
/// ));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct All<T> {
    policies: T,
    metas: Vec<Meta>,
}

impl<T: sealed::Tuple> All<T> {
    /// All of these policies, checked together.
    pub fn new(policies: T) -> Self {
        let metas = policies.metas();
        All { policies, metas }
    }
}

impl<T: sealed::Tuple> sealed::Enforce for All<T> {
    type Keys = T::Keys;

    fn metas(&self) -> &[Meta] {
        &self.metas
    }

    fn extract(&self, head: &RequestHead<'_>, degraded: &mut bool) -> Result<Self::Keys, Refused> {
        self.policies.extract(head, degraded)
    }

    fn check_now(
        &self,
        keys: &Self::Keys,
        cost: u64,
        fields: bool,
    ) -> Option<Result<Verdict, LimiterError>> {
        Some(self.policies.decide(keys, cost, self.metas.len(), fields))
    }

    fn check<'a>(
        &'a self,
        keys: &'a Self::Keys,
        cost: u64,
        fields: bool,
    ) -> impl Future<Output = Result<Verdict, LimiterError>> + Send + 'a {
        ready(self.policies.decide(keys, cost, self.metas.len(), fields))
    }
}

impl<T: sealed::Tuple> Policies for All<T> {}

macro_rules! all_of {
    ($($L:ident $X:ident $i:tt),+) => {
        impl<$($L, $X),+> sealed::Tuple for ($(Policy<$L, $X>,)+)
        where
            $($L: LocalLimiter, $L::Key: Clone, $X: KeyExtractor<Key = $L::Key>,)+
        {
            type Keys = ($(Option<$L::Key>,)+);

            fn metas(&self) -> Vec<Meta> {
                vec![$(self.$i.meta[0].clone()),+]
            }

            fn extract(&self, head: &RequestHead<'_>, degraded: &mut bool) -> Result<Self::Keys, Refused> {
                Ok(($(self.$i.extract_key(head, degraded)?,)+))
            }

            fn decide(&self, keys: &Self::Keys, cost: u64, len: usize, fields: bool) -> Result<Verdict, LimiterError> {
                let handles = ($(keys.$i.as_ref().map(|k| self.$i.limiter.handle(k)),)+);
                // Index into `limits` → index of the policy.
                let mut limits: Vec<(&dyn Limit, u64)> = Vec::with_capacity(len);
                let mut policy_of = Vec::with_capacity(len);
                $(
                    if let Some(h) = &handles.$i {
                        limits.push((<$L as sealed::Local>::as_limit(h), cost));
                        policy_of.push($i);
                    }
                )+
                let multi = check_all(&limits)?;
                let denied_by = multi.denied_by().map(|i| policy_of[i]);
                let retry_after = multi.retry_after().unwrap_or(Duration::ZERO);
                if !fields && denied_by.is_none() {
                    return Ok(Verdict { denied_by, retry_after, reports: Reports::One(None), degraded: false });
                }
                // check_all reports the least room left, not each limit's: every policy is
                // peeked for its own (after the charge when allowed; nothing was charged when
                // denied). The one that bound a denial reports the wait for the request.
                let reports = Reports::Many(vec![$(
                    keys.$i.as_ref().map(|k| {
                        let d = self.$i.limiter.peek(k);
                        let reset = if denied_by == Some($i) { retry_after } else { d.reset_after() };
                        self.$i.report(k, &d, reset)
                    })
                ),+]);
                Ok(Verdict { denied_by, retry_after, reports, degraded: false })
            }
        }
    };
}

all_of!(L0 X0 0, L1 X1 1);
all_of!(L0 X0 0, L1 X1 1, L2 X2 2);
all_of!(L0 X0 0, L1 X1 1, L2 X2 2, L3 X3 3);
all_of!(L0 X0 0, L1 X1 1, L2 X2 2, L3 X3 3, L4 X4 4);
all_of!(L0 X0 0, L1 X1 1, L2 X2 2, L3 X3 3, L4 X4 4, L5 X5 5);
