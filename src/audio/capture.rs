//! Live ALSA capture (cargo feature `capture`). Filled in by the board issue.
