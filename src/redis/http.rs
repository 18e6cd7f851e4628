//! The HTTP layer's [`Limiter`] for a [`RedisLimiter`] (features
//! `redis` and `tower`): keys are strings, and a decision the policy made while Redis was
//! unavailable counts as degraded.

use super::{Error, Path, RedisLimiter};
use crate::Quota;
use crate::http::{Checked, Limiter, LimiterError};

impl Limiter for RedisLimiter {
    type Key = String;

    async fn check(&self, key: &String, cost: u64) -> Result<Checked, LimiterError> {
        match self.check_n(key, cost).await {
            Ok(d) => Ok(Checked {
                decision: d.decision(),
                degraded: !matches!(d.path(), Path::Redis | Path::Lease),
            }),
            Err(Error::Cost(e)) => Err(LimiterError::Cost(e)),
            Err(e) => Err(LimiterError::Unavailable(Box::new(e))),
        }
    }

    fn quota(&self, _key: &String) -> Quota {
        RedisLimiter::quota(self)
    }
}
