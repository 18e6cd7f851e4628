//! What a limiter promises: at most `limit` units of cost in any `window`.
//!
//! A quota is plain data, validated when it is made; it depends on nothing else in the
//! crate. Limiters compile it into a rule (`algo::Rule`), and what one key of it costs in
//! memory is [`Quota::bytes_per_key`], measured where the state is laid out.

use core::fmt;
use core::time::Duration;

use thiserror::Error;

/// The largest `limit` a [`Quota`] accepts: 2³¹ − 1.
///
/// Snapshots of the admitted-cost counter are stored in 32 bits beside a 32-bit bucket tag,
/// so a window's sum must stay below 2³²; in Weighted mode a window can briefly hold up to
/// twice the limit (the interpolated oldest bucket plus the rest), hence one bit less.
pub const MAX_LIMIT: u64 = (1 << 31) - 1;

/// The largest number of buckets (`window / granularity`) a [`Quota`] accepts.
pub const MAX_BUCKETS: u64 = 65_536;

/// Which algorithm counts a quota. See the crate documentation for the maths and the
/// guarantees of each, and the `slidegate simulate` command for what each admits on your
/// traffic.
///
/// ```
/// use slidegate::{Mode, Quota};
/// use std::time::Duration;
///
/// let q = Quota::new(100, Duration::from_secs(60))?.with_mode(Mode::Weighted);
/// assert_eq!(q.mode(), Mode::Weighted);
/// assert_eq!(Quota::new(100, Duration::from_secs(60))?.mode(), Mode::Strict);
/// # Ok::<(), slidegate::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Counts the whole oldest bucket: never admits more than `limit` in any interval of
    /// length `window`; may deny up to one granularity early.
    #[default]
    Strict,
    /// Strict with last-admission marks: counts the oldest bucket whole, as Strict does,
    /// unless its last admission has left the window, and then not at all. Never admits
    /// more than `limit` in any interval of length `window`, and denies early only while the
    /// oldest bucket's last admission is still inside it (up to `⌈G / 254⌉` later, the mark's
    /// precision), where Strict denies until the whole bucket has left. Same memory as
    /// Strict; an admission records its time in its bucket's slot when that moves its mark.
    StrictMarked,
    /// Cloudflare's sliding-window counter: counts the oldest bucket in proportion to how much
    /// of it is still inside the window. Admits closer to `limit` on smooth traffic and may
    /// over-admit on bursts.
    Weighted,
    /// The classic fixed window: counts only the current window `[k·W, (k + 1)·W)`, so up to
    /// `2·limit` can pass in a `W`-long span across a boundary. Its granularity is the window
    /// ([`Quota::with_mode`] sets it).
    FixedWindow,
    /// The exact sliding log: admits iff the cost admitted in `(t − W, t]` plus the request is
    /// at most `limit` — the definition itself. Keeps the time of each of the last `limit`
    /// admitted units (see [`Quota::bytes_per_key`]). The granularity is not used.
    ExactLog,
    /// GCRA (the generic cell rate algorithm, as in governor): a token bucket of `limit` units
    /// refilled at one unit every `⌈W / limit⌉`; bursts of up to `limit` at once. One word of
    /// state per key. The granularity is not used.
    Gcra,
}

/// A quota given to a constructor of [`Quota`] is not one slidegate can honour.
///
/// Every message names the field and the value at fault.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `limit` is zero.
    #[error("limit must be at least 1, got 0")]
    ZeroLimit,
    /// `limit` is above [`MAX_LIMIT`].
    #[error("limit {limit} is above the maximum {max}")]
    LimitTooLarge {
        /// The limit asked for.
        limit: u64,
        /// [`MAX_LIMIT`].
        max: u64,
    },
    /// `window` is zero.
    #[error("window must be longer than zero, got {0:?}")]
    ZeroWindow(Duration),
    /// `window` does not fit in 2⁶³ nanoseconds (about 292 years).
    #[error("window {0:?} is longer than the maximum of 2^63 ns")]
    WindowTooLong(Duration),
    /// `granularity` is zero.
    #[error("granularity must be longer than zero, got {0:?}")]
    ZeroGranularity(Duration),
    /// `granularity` is longer than `window`.
    #[error("granularity {granularity:?} is longer than the window {window:?}")]
    GranularityExceedsWindow {
        /// The granularity asked for.
        granularity: Duration,
        /// The quota's window.
        window: Duration,
    },
    /// `granularity` does not divide `window` into whole buckets.
    #[error("granularity {granularity:?} does not divide the window {window:?} into whole buckets")]
    GranularityDoesNotDivide {
        /// The granularity asked for.
        granularity: Duration,
        /// The quota's window.
        window: Duration,
    },
    /// A [`Mode::FixedWindow`] quota was given a granularity other than its window.
    #[error(
        "a fixed window counts whole windows: granularity {granularity:?} must equal the window {window:?}"
    )]
    FixedWindowGranularity {
        /// The granularity asked for.
        granularity: Duration,
        /// The quota's window.
        window: Duration,
    },
    /// `window / granularity` is above [`MAX_BUCKETS`].
    #[error("window / granularity = {buckets} buckets, above the maximum {max}")]
    TooManyBuckets {
        /// The number of buckets asked for.
        buckets: u64,
        /// [`MAX_BUCKETS`].
        max: u64,
    },
}

/// At most `limit` units of cost in any `window`, counted in buckets of `granularity`.
///
/// `Quota::new` picks the default granularity: a tenth of the window when the window is a
/// whole number of 10 ns (any window of whole microseconds), else the window itself. Ten
/// buckets bound Strict mode's early denial to a tenth of the window while keeping a key's
/// state small ([`Quota::bytes_per_key`]); choose a finer granularity with
/// [`Quota::with_granularity`].
///
/// ```
/// use slidegate::Quota;
/// use std::time::Duration;
///
/// let q = Quota::new(10, Duration::from_secs(1))?;
/// assert_eq!(q.granularity(), Duration::from_millis(100));
/// assert_eq!(q.buckets(), 10);
///
/// let hourly = Quota::new(1000, Duration::from_secs(3600))?
///     .with_granularity(Duration::from_secs(1))?;
/// assert_eq!(hourly.buckets(), 3600);
///
/// let err = Quota::new(10, Duration::from_secs(1))?
///     .with_granularity(Duration::from_millis(300))
///     .unwrap_err();
/// assert!(err.to_string().contains("300ms"));
/// # Ok::<(), slidegate::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u64,
    window: u64,
    granularity: u64,
    mode: Mode,
}

/// The number of buckets `Quota::new` aims for.
const DEFAULT_BUCKETS: u64 = 10;

impl Quota {
    /// At most `limit` in any `window`, Strict mode, the default granularity.
    pub fn new(limit: u64, window: Duration) -> Result<Quota, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        if limit > MAX_LIMIT {
            return Err(ConfigError::LimitTooLarge {
                limit,
                max: MAX_LIMIT,
            });
        }
        if window.is_zero() {
            return Err(ConfigError::ZeroWindow(window));
        }
        let w = u64::try_from(window.as_nanos())
            .ok()
            .filter(|&w| w <= 1 << 63)
            .ok_or(ConfigError::WindowTooLong(window))?;
        let granularity = if w % DEFAULT_BUCKETS == 0 {
            w / DEFAULT_BUCKETS
        } else {
            w
        };
        Ok(Quota {
            limit,
            window: w,
            granularity,
            mode: Mode::Strict,
        })
    }

    /// The same quota counted in buckets of `granularity`, which must divide the window into
    /// at most [`MAX_BUCKETS`] whole buckets. `granularity == window` is Cloudflare's
    /// two-counter window.
    pub fn with_granularity(self, granularity: Duration) -> Result<Quota, ConfigError> {
        let window = Duration::from_nanos(self.window);
        if granularity.is_zero() {
            return Err(ConfigError::ZeroGranularity(granularity));
        }
        if self.mode == Mode::FixedWindow && granularity != window {
            return Err(ConfigError::FixedWindowGranularity {
                granularity,
                window,
            });
        }
        if granularity > window {
            return Err(ConfigError::GranularityExceedsWindow {
                granularity,
                window,
            });
        }
        // Fits: granularity <= window < 2^64 ns.
        let g = granularity.as_nanos() as u64;
        if self.window % g != 0 {
            return Err(ConfigError::GranularityDoesNotDivide {
                granularity,
                window,
            });
        }
        let buckets = self.window / g;
        if buckets > MAX_BUCKETS {
            return Err(ConfigError::TooManyBuckets {
                buckets,
                max: MAX_BUCKETS,
            });
        }
        Ok(Quota {
            granularity: g,
            ..self
        })
    }

    /// The same quota in another [`Mode`]. [`Mode::FixedWindow`] counts whole windows, so it
    /// sets the granularity to the window.
    ///
    /// ```
    /// use slidegate::{Mode, Quota};
    /// use std::time::Duration;
    ///
    /// let q = Quota::new(100, Duration::from_secs(60))?.with_mode(Mode::FixedWindow);
    /// assert_eq!(q.granularity(), Duration::from_secs(60));
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn with_mode(self, mode: Mode) -> Quota {
        let granularity = if mode == Mode::FixedWindow {
            self.window
        } else {
            self.granularity
        };
        Quota {
            mode,
            granularity,
            ..self
        }
    }

    pub(crate) fn window_nanos(&self) -> u64 {
        self.window
    }

    /// The most cost admitted in any window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    /// The bucket length.
    pub fn granularity(&self) -> Duration {
        Duration::from_nanos(self.granularity)
    }

    /// `window / granularity`.
    pub fn buckets(&self) -> u64 {
        self.window / self.granularity
    }

    /// The algorithm that counts this quota.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub(crate) fn granularity_nanos(&self) -> u64 {
        self.granularity
    }

    /// The most usage a report past the limit can leave a window counting: `2²³ − 1 − L` for
    /// a limit `L ≤ 2²¹` (at least 6 291 455), `2³¹ − 1 − L` above. Each store counts exactly
    /// only up to a bound, so a report (or a commit's excess) that would take the window's
    /// usage past this is charged up to it and the rest reported as
    /// [`Usage::clamped`](crate::Usage::clamped), never wrapped. A function of the quota
    /// alone, so that every store and backend clamps alike; a window that holds this much
    /// denies every cost until its usage leaves, as a larger count would.
    ///
    /// ```
    /// use slidegate::Quota;
    /// use std::time::Duration;
    ///
    /// let q = Quota::new(100, Duration::from_secs(1))?;
    /// assert_eq!(q.usage_ceiling(), (1 << 23) - 1 - 100);
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn usage_ceiling(&self) -> u64 {
        let top: u64 = if self.limit <= 1 << 21 {
            (1 << 23) - 1
        } else {
            (1 << 31) - 1
        };
        top.saturating_sub(self.limit)
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("limit", &self.limit)
            .field("window", &self.window())
            .field("granularity", &self.granularity())
            .field("mode", &self.mode)
            .finish()
    }
}
