//! Why a description is refused where it is consumed.
//!
//! Descriptions (`…Desc`) are plain data with public fields, so a constructor cannot assume that
//! their `with_*` setters clamped them: each description that feeds state another type relies on
//! has a `validate(&self, limits)` that its consuming constructor calls first, refusing with a
//! [`DescError`] (and creating nothing) any value that would panic, hang, wrap or reach Vulkan
//! out of range later.

/// A description field outside what its consumer can run with; nothing was created.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DescError {
    /// The field is below its minimum.
    #[error("{desc} `{name}`: {field} = {value} is below the minimum {min}")]
    TooSmall {
        /// The description's type.
        desc: &'static str,
        /// The description's name (empty where it has none).
        name: String,
        /// The field (`sampling.frame_interval`, …).
        field: &'static str,
        /// Its value.
        value: u64,
        /// The smallest value accepted.
        min: u64,
    },
    /// The field is above its maximum.
    #[error("{desc} `{name}`: {field} = {value} is above the maximum {max} ({why})")]
    TooLarge {
        /// The description's type.
        desc: &'static str,
        /// The description's name (empty where it has none).
        name: String,
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The largest value accepted.
        max: u64,
        /// Where the maximum comes from.
        why: &'static str,
    },
}

/// `Ok` when `min <= value <= max`, else the [`DescError`] naming the bound passed.
pub fn check_range(
    desc: &'static str,
    name: &str,
    field: &'static str,
    value: u64,
    min: u64,
    max: u64,
    why: &'static str,
) -> Result<(), DescError> {
    if value < min {
        return Err(DescError::TooSmall { desc, name: name.to_owned(), field, value, min });
    }
    if value > max {
        return Err(DescError::TooLarge { desc, name: name.to_owned(), field, value, max, why });
    }
    Ok(())
}
