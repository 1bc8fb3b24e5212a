//! Local trust: which of the surface's tools the agent may see and call.

/// Whether `c` is one of the invisible characters stripped from both ends
/// of a tool name before the reservation check: U+0000, U+0009–U+000D,
/// U+0020, U+0085, U+00A0, U+1680, U+2000–U+200D, U+2028, U+2029, U+202F,
/// U+205F, U+3000 and U+FEFF.
#[must_use]
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{0000}'
            | '\u{0009}'..='\u{000D}'
            | '\u{0020}'
            | '\u{0085}'
            | '\u{00A0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200D}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202F}'
            | '\u{205F}'
            | '\u{3000}'
            | '\u{FEFF}'
    )
}
