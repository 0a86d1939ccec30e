//! Target expressions: the language of target codes, population bases and named codes.
//!
//! ```text
//! expr    := and ( OR and )*
//! and     := unary ( AND unary )*
//! unary   := NOT unary | primary
//! primary := '(' expr ')' | '*' | NAME
//!          | NAME op NUMBER | NAME IN '(' NUMBER (',' NUMBER)* ')'
//!          | NAME BETWEEN NUMBER AND NUMBER
//! op      := '=' | '!=' | '<' | '<=' | '>' | '>='
//! NAME    := [A-Za-z_][A-Za-z0-9_.]*
//! NUMBER  := '-'? [0-9]+ ('.' [0-9]+)?
//! ```
//! Keywords are case-insensitive and reserved. A bare `NAME` is a named code; a `NAME`
//! followed by a comparison is a variable. `*` is every respondent.

use std::fmt;

use crate::limits::MAX_EXPR_DEPTH;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    /// Whether `value op rhs` holds.
    pub fn holds(self, value: f64, rhs: f64) -> bool {
        match self {
            CmpOp::Eq => value == rhs,
            CmpOp::Ne => value != rhs,
            CmpOp::Lt => value < rhs,
            CmpOp::Le => value <= rhs,
            CmpOp::Gt => value > rhs,
            CmpOp::Ge => value >= rhs,
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// A parsed target expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// `*`: every respondent.
    All,
    /// A named code defined by the survey.
    Code(String),
    /// `VAR op NUMBER`.
    Compare {
        /// Variable name.
        var: String,
        /// Operator.
        op: CmpOp,
        /// Right-hand side.
        value: f64,
    },
    /// `VAR IN (n, ...)`.
    In {
        /// Variable name.
        var: String,
        /// Listed values.
        values: Vec<f64>,
    },
    /// `VAR BETWEEN low AND high`, inclusive.
    Between {
        /// Variable name.
        var: String,
        /// Lower bound, inclusive.
        low: f64,
        /// Upper bound, inclusive.
        high: f64,
    },
    /// Complement within the survey's respondents.
    Not(Box<Expr>),
    /// All of these (two or more).
    And(Vec<Expr>),
    /// Any of these (two or more).
    Or(Vec<Expr>),
}

/// What a name in an expression refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// A survey variable (left of a comparison).
    Variable,
    /// A named code (bare name).
    Code,
}

impl Expr {
    /// Parses a target expression.
    pub fn parse(input: &str) -> Result<Expr, ParseError> {
        let (tokens, chars) = lex(input)?;
        let mut parser = Parser {
            tokens,
            pos: 0,
            end: chars + 1,
        };
        let expr = parser.expr(0)?;
        if let Some(token) = parser.peek() {
            return Err(ParseError::new(
                token.at,
                "AND, OR or the end of the expression",
                token.describe(),
            ));
        }
        // The canonical text may add parentheses the input left to precedence (an AND
        // among ORs), and a survey stores that text to parse again when it loads.
        if expr.written_depth() > MAX_EXPR_DEPTH {
            return Err(ParseError::new(
                1,
                &format!(
                    "nesting no deeper than {MAX_EXPR_DEPTH} once each AND among ORs is \
                     written in parentheses"
                ),
                "deeper nesting".to_owned(),
            ));
        }
        Ok(expr)
    }

    /// The nesting of parentheses and `NOT` in the canonical text, as the parser counts it.
    fn written_depth(&self) -> usize {
        let within =
            |item: &Expr| usize::from(item.needs_parens_inside_operator()) + item.written_depth();
        match self {
            Expr::Not(inner) => 1 + within(inner),
            Expr::And(items) | Expr::Or(items) => items.iter().map(within).max().unwrap_or(0),
            _ => 0,
        }
    }

    /// Calls `visit` for every name the expression refers to, in order of appearance.
    pub fn visit_names<'a>(&'a self, visit: &mut impl FnMut(NameKind, &'a str)) {
        match self {
            Expr::All => {}
            Expr::Code(name) => visit(NameKind::Code, name),
            Expr::Compare { var, .. } | Expr::In { var, .. } | Expr::Between { var, .. } => {
                visit(NameKind::Variable, var)
            }
            Expr::Not(inner) => inner.visit_names(visit),
            Expr::And(items) | Expr::Or(items) => {
                items.iter().for_each(|item| item.visit_names(visit))
            }
        }
    }

    fn needs_parens_inside_operator(&self) -> bool {
        matches!(self, Expr::And(_) | Expr::Or(_))
    }
}

impl fmt::Display for Expr {
    /// Canonical text: parsing it gives back an equal expression.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn child(f: &mut fmt::Formatter<'_>, expr: &Expr) -> fmt::Result {
            if expr.needs_parens_inside_operator() {
                write!(f, "({expr})")
            } else {
                write!(f, "{expr}")
            }
        }
        fn joined(f: &mut fmt::Formatter<'_>, items: &[Expr], keyword: &str) -> fmt::Result {
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    write!(f, " {keyword} ")?;
                }
                child(f, item)?;
            }
            Ok(())
        }
        match self {
            Expr::All => f.write_str("*"),
            Expr::Code(name) => f.write_str(name),
            Expr::Compare { var, op, value } => write!(f, "{var} {} {value}", op.symbol()),
            Expr::In { var, values } => {
                write!(f, "{var} IN (")?;
                for (index, value) in values.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{value}")?;
                }
                f.write_str(")")
            }
            Expr::Between { var, low, high } => write!(f, "{var} BETWEEN {low} AND {high}"),
            Expr::Not(inner) => {
                f.write_str("NOT ")?;
                child(f, inner)
            }
            Expr::And(items) => joined(f, items, "AND"),
            Expr::Or(items) => joined(f, items, "OR"),
        }
    }
}

/// Why an expression does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected {expected} at character {position}, found {found}")]
pub struct ParseError {
    /// 1-based character position of the problem.
    pub position: usize,
    /// What the parser expected there.
    pub expected: String,
    /// What it found.
    pub found: String,
}

impl ParseError {
    fn new(position: usize, expected: &str, found: String) -> Self {
        ParseError {
            position,
            expected: expected.to_owned(),
            found,
        }
    }
}

#[derive(Debug, PartialEq)]
enum Kind {
    LParen,
    RParen,
    Comma,
    Star,
    Op(CmpOp),
    Number(f64),
    Name(String),
    And,
    Or,
    Not,
    In,
    Between,
}

#[derive(Debug)]
struct Token {
    kind: Kind,
    /// 1-based character position.
    at: usize,
}

impl Token {
    fn describe(&self) -> String {
        match &self.kind {
            Kind::LParen => "'('".into(),
            Kind::RParen => "')'".into(),
            Kind::Comma => "','".into(),
            Kind::Star => "'*'".into(),
            Kind::Op(op) => format!("'{}'", op.symbol()),
            Kind::Number(n) => format!("number {n}"),
            Kind::Name(name) => format!("name '{}'", shorten(name)),
            Kind::And => "AND".into(),
            Kind::Or => "OR".into(),
            Kind::Not => "NOT".into(),
            Kind::In => "IN".into(),
            Kind::Between => "BETWEEN".into(),
        }
    }
}

/// Keeps error messages short whatever the input.
pub(crate) fn shorten(text: &str) -> String {
    const MAX: usize = 32;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        let head: String = text.chars().take(MAX).collect();
        format!("{head}…")
    }
}

fn describe_char(c: char) -> String {
    if c.is_control() {
        format!("character U+{:04X}", u32::from(c))
    } else {
        format!("'{c}'")
    }
}

/// Most digits [`short_decimal`] reads: the integer they spell is below 10^15 < 2^53,
/// exact in f64.
const SHORT_DIGITS: usize = 15;

/// Powers of ten exact in f64.
const EXACT_POWERS_OF_TEN: [f64; SHORT_DIGITS + 1] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// A lexed number (`-`? digits (`.` digits)?) of at most [`SHORT_DIGITS`] digits, without
/// the general parser: the integer its digits spell and its power of ten are exact in f64,
/// so one division rounds it correctly, as `str::parse` would.
fn short_decimal(text: &str) -> Option<f64> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    if whole.len() + fraction.len() > SHORT_DIGITS {
        return None;
    }
    let digits = whole.bytes().chain(fraction.bytes());
    debug_assert!(digits.clone().all(|b| b.is_ascii_digit()), "lexed: {text}");
    let integer = digits.fold(0u64, |n, digit| n * 10 + u64::from(digit - b'0'));
    let value = integer as f64 / EXACT_POWERS_OF_TEN[fraction.len()];
    Some(if negative { -value } else { value })
}

/// Reads `input` a character at a time, counting characters for error positions (the
/// text is read in place: only names become strings).
struct Cursor<'a> {
    text: &'a str,
    /// Byte offset of the next character.
    byte: usize,
    /// 0-based character index of the next character.
    index: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.byte..].chars().next()
    }

    fn bump(&mut self) {
        if let Some(c) = self.peek() {
            self.byte += c.len_utf8();
            self.index += 1;
        }
    }

    /// Skips ASCII characters while `keep` holds (the runs of names and numbers): a byte
    /// counts as a character only when it is ASCII.
    fn skip_ascii(&mut self, keep: impl Fn(u8) -> bool) {
        let run = self.text.as_bytes()[self.byte..]
            .iter()
            .take_while(|b| b.is_ascii() && keep(**b))
            .count();
        self.byte += run;
        self.index += run;
    }

    /// What is at the next character, for an error message.
    fn found(&self) -> String {
        self.peek().map_or_else(|| END.to_owned(), describe_char)
    }
}

/// The tokens of `input`, and its length in characters.
fn lex(input: &str) -> Result<(Vec<Token>, usize), ParseError> {
    // Room at once for a typical target's tokens (`AGE BETWEEN 18 AND 34 AND F2554` has 7).
    let mut tokens = Vec::with_capacity((input.len() / 2 + 1).min(16));
    let mut cursor = Cursor {
        text: input,
        byte: 0,
        index: 0,
    };
    while let Some(c) = cursor.peek() {
        let at = cursor.index + 1;
        let single = |kind| Token { kind, at };
        match c {
            c if c.is_whitespace() => {}
            '(' => tokens.push(single(Kind::LParen)),
            ')' => tokens.push(single(Kind::RParen)),
            ',' => tokens.push(single(Kind::Comma)),
            '*' => tokens.push(single(Kind::Star)),
            '=' => tokens.push(single(Kind::Op(CmpOp::Eq))),
            '!' | '<' | '>' => {
                cursor.bump();
                let has_eq = cursor.peek() == Some('=');
                let op = match (c, has_eq) {
                    ('!', true) => CmpOp::Ne,
                    ('<', true) => CmpOp::Le,
                    ('<', false) => CmpOp::Lt,
                    ('>', true) => CmpOp::Ge,
                    ('>', false) => CmpOp::Gt,
                    _ => return Err(ParseError::new(at + 1, "'=' after '!'", cursor.found())),
                };
                tokens.push(single(Kind::Op(op)));
                if has_eq {
                    cursor.bump();
                }
                continue;
            }
            '-' | '0'..='9' => {
                let start = cursor.byte;
                if c == '-' {
                    cursor.bump();
                }
                let digits_from = cursor.index;
                cursor.skip_ascii(|b| b.is_ascii_digit());
                if cursor.index == digits_from {
                    return Err(ParseError::new(cursor.index + 1, "a digit", cursor.found()));
                }
                if cursor.peek() == Some('.') {
                    cursor.bump();
                    let fraction_from = cursor.index;
                    cursor.skip_ascii(|b| b.is_ascii_digit());
                    if cursor.index == fraction_from {
                        return Err(ParseError::new(
                            cursor.index + 1,
                            "a digit after '.'",
                            cursor.found(),
                        ));
                    }
                }
                // `5AND`, `2OR`: a keyword or name glued to a number is a typo, not two
                // tokens (`5X` already fails; `5AND` must not read as `5 AND`).
                if cursor
                    .peek()
                    .is_some_and(|next| next.is_ascii_alphanumeric() || next == '_' || next == '.')
                {
                    return Err(ParseError::new(
                        cursor.index + 1,
                        "a space, an operator or a parenthesis after a number",
                        cursor.found(),
                    ));
                }
                let text = &input[start..cursor.byte];
                let value = match short_decimal(text) {
                    Some(value) => value,
                    None => text.parse().map_err(|_| {
                        ParseError::new(at, "a number", format!("'{}'", shorten(text)))
                    })?,
                };
                if !value.is_finite() {
                    return Err(ParseError::new(
                        at,
                        "a finite number",
                        format!("'{}'", shorten(text)),
                    ));
                }
                tokens.push(single(Kind::Number(value)));
                continue;
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = cursor.byte;
                cursor.skip_ascii(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
                let word = &input[start..cursor.byte];
                let keyword = |name: &str| word.eq_ignore_ascii_case(name);
                let kind = if keyword("AND") {
                    Kind::And
                } else if keyword("OR") {
                    Kind::Or
                } else if keyword("NOT") {
                    Kind::Not
                } else if keyword("IN") {
                    Kind::In
                } else if keyword("BETWEEN") {
                    Kind::Between
                } else {
                    Kind::Name(word.to_owned())
                };
                tokens.push(single(kind));
                continue;
            }
            other => {
                return Err(ParseError::new(
                    at,
                    "a name, a number, an operator or a parenthesis",
                    describe_char(other),
                ))
            }
        }
        cursor.bump();
    }
    Ok((tokens, cursor.index))
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    /// Position reported for "the end of the expression".
    end: usize,
}

const END: &str = "the end of the expression";

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next_is(&self, kind: &Kind) -> bool {
        self.peek().is_some_and(|token| &token.kind == kind)
    }

    fn error_here(&self, expected: &str) -> ParseError {
        match self.peek() {
            Some(token) => ParseError::new(token.at, expected, token.describe()),
            None => ParseError::new(self.end, expected, END.to_owned()),
        }
    }

    fn expect(&mut self, kind: &Kind, expected: &str) -> Result<(), ParseError> {
        if self.next_is(kind) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error_here(expected))
        }
    }

    fn number(&mut self) -> Result<f64, ParseError> {
        match self.peek() {
            Some(Token {
                kind: Kind::Number(value),
                ..
            }) => {
                let value = *value;
                self.pos += 1;
                Ok(value)
            }
            _ => Err(self.error_here("a number")),
        }
    }

    fn enter(&self, depth: usize) -> Result<usize, ParseError> {
        if depth >= MAX_EXPR_DEPTH {
            let at = self.peek().map_or(self.end, |token| token.at);
            Err(ParseError::new(
                at,
                &format!("nesting no deeper than {MAX_EXPR_DEPTH}"),
                "deeper nesting".to_owned(),
            ))
        } else {
            Ok(depth + 1)
        }
    }

    fn expr(&mut self, depth: usize) -> Result<Expr, ParseError> {
        self.chain(depth, &Kind::Or, Parser::and, Expr::Or)
    }

    fn and(&mut self, depth: usize) -> Result<Expr, ParseError> {
        self.chain(depth, &Kind::And, Parser::unary, Expr::And)
    }

    /// `item ( keyword item )*`: the lone item as it is, two or more made one by `make`.
    fn chain(
        &mut self,
        depth: usize,
        keyword: &Kind,
        item: fn(&mut Parser, usize) -> Result<Expr, ParseError>,
        make: fn(Vec<Expr>) -> Expr,
    ) -> Result<Expr, ParseError> {
        let first = item(self, depth)?;
        if !self.next_is(keyword) {
            return Ok(first);
        }
        let mut items = vec![first];
        while self.next_is(keyword) {
            self.pos += 1;
            items.push(item(self, depth)?);
        }
        Ok(make(items))
    }

    fn unary(&mut self, depth: usize) -> Result<Expr, ParseError> {
        if self.next_is(&Kind::Not) {
            let depth = self.enter(depth)?;
            self.pos += 1;
            return Ok(Expr::Not(Box::new(self.unary(depth)?)));
        }
        self.primary(depth)
    }

    fn primary(&mut self, depth: usize) -> Result<Expr, ParseError> {
        if let Some(name) = self.take_name() {
            return self.after_name(name);
        }
        if self.next_is(&Kind::LParen) {
            let depth = self.enter(depth)?;
            self.pos += 1;
            let inner = self.expr(depth)?;
            self.expect(&Kind::RParen, "')'")?;
            return Ok(inner);
        }
        if self.next_is(&Kind::Star) {
            self.pos += 1;
            return Ok(Expr::All);
        }
        Err(self.error_here("a name, '*', NOT or '('"))
    }

    /// The name at the cursor, moved out of its token (the parser never reads a token
    /// twice), and the cursor past it.
    fn take_name(&mut self) -> Option<String> {
        match self.tokens.get_mut(self.pos) {
            Some(Token {
                kind: Kind::Name(name),
                ..
            }) => {
                let name = std::mem::take(name);
                self.pos += 1;
                Some(name)
            }
            _ => None,
        }
    }

    fn after_name(&mut self, var: String) -> Result<Expr, ParseError> {
        if let Some(Token {
            kind: Kind::Op(op), ..
        }) = self.peek()
        {
            let op = *op;
            self.pos += 1;
            let value = self.number()?;
            return Ok(Expr::Compare { var, op, value });
        }
        if self.next_is(&Kind::In) {
            self.pos += 1;
            self.expect(&Kind::LParen, "'(' after IN")?;
            let mut values = vec![self.number()?];
            while self.next_is(&Kind::Comma) {
                self.pos += 1;
                values.push(self.number()?);
            }
            self.expect(&Kind::RParen, "',' or ')'")?;
            return Ok(Expr::In { var, values });
        }
        if self.next_is(&Kind::Between) {
            self.pos += 1;
            let low = self.number()?;
            self.expect(&Kind::And, "AND in BETWEEN … AND …")?;
            let high = self.number()?;
            return Ok(Expr::Between { var, low, high });
        }
        match self.peek().map(|token| &token.kind) {
            Some(Kind::Number(_) | Kind::Name(_) | Kind::Star | Kind::LParen) => {
                Err(self
                    .error_here("an operator (=, !=, <, <=, >, >=), IN, BETWEEN, AND, OR or ')'"))
            }
            _ => Ok(Expr::Code(var)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(text: &str) -> Expr {
        Expr::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn parses_the_spec_examples() {
        assert_eq!(parse("F2554"), Expr::Code("F2554".into()));
        assert_eq!(
            parse("GENDER = 2"),
            Expr::Compare {
                var: "GENDER".into(),
                op: CmpOp::Eq,
                value: 2.0
            }
        );
        let complex = parse("(GENDER = 2 AND AGE BETWEEN 25 AND 54) OR NOT SMOKER = 1");
        assert_eq!(
            complex.to_string(),
            "(GENDER = 2 AND AGE BETWEEN 25 AND 54) OR NOT SMOKER = 1"
        );
        assert_eq!(parse("*"), Expr::All);
    }

    #[test]
    fn keywords_are_case_insensitive_and_and_binds_tighter() {
        let expr = parse("a = 1 or b = 2 and not c in (1, 2.5, -3)");
        assert_eq!(
            expr.to_string(),
            "a = 1 OR (b = 2 AND NOT c IN (1, 2.5, -3))"
        );
    }

    #[test]
    fn every_operator() {
        for (text, op) in [
            ("=", CmpOp::Eq),
            ("!=", CmpOp::Ne),
            ("<", CmpOp::Lt),
            ("<=", CmpOp::Le),
            (">", CmpOp::Gt),
            (">=", CmpOp::Ge),
        ] {
            assert_eq!(
                parse(&format!("X.Y_1{text}-0.5")),
                Expr::Compare {
                    var: "X.Y_1".into(),
                    op,
                    value: -0.5
                }
            );
        }
    }

    #[test]
    fn errors_say_where_and_what() {
        let cases = [
            ("GENDER =", 9, "a number"),
            ("GENDER = x", 10, "a number"),
            ("(A = 1", 7, "')'"),
            ("A = 1 B", 7, "AND, OR or the end of the expression"),
            ("", 1, "a name, '*', NOT or '('"),
            ("A BETWEEN 1 OR 2", 13, "AND in BETWEEN … AND …"),
            ("A IN ()", 7, "a number"),
            ("A ! 1", 4, "'=' after '!'"),
            ("A = 1.", 7, "a digit after '.'"),
            // A keyword or name glued to a number is no space between two tokens.
            (
                "AGE = 5AND B = 2",
                8,
                "a space, an operator or a parenthesis after a number",
            ),
            (
                "G=2OR A>3",
                4,
                "a space, an operator or a parenthesis after a number",
            ),
            (
                "A IN (1_2)",
                8,
                "a space, an operator or a parenthesis after a number",
            ),
            (
                "A = 1.5.5",
                8,
                "a space, an operator or a parenthesis after a number",
            ),
            ("é = 1", 1, "a name, a number, an operator or a parenthesis"),
            // Positions count characters, not bytes: U+3000 is one (three bytes).
            ("A\u{3000}= x", 5, "a number"),
            ("\u{3000}\u{3000}A !", 6, "'=' after '!'"),
            (
                "A 1",
                3,
                "an operator (=, !=, <, <=, >, >=), IN, BETWEEN, AND, OR or ')'",
            ),
        ];
        for (text, position, expected) in cases {
            let error = Expr::parse(text).unwrap_err();
            assert_eq!(
                (error.position, error.expected.as_str()),
                (position, expected),
                "{text}"
            );
        }
    }

    #[test]
    fn short_numbers_at_their_bounds() {
        for text in [
            "0",
            "-0",
            "-0.000",
            "000000000000001",
            "999999999999999",
            "-99999999.9999999",
            "0.00000000000001",
            "0.1",
            "4.35",
        ] {
            let general: f64 = text.parse().unwrap();
            assert_eq!(
                short_decimal(text).map(f64::to_bits),
                Some(general.to_bits()),
                "{text}"
            );
        }
        // Sixteen digits go to the general parser.
        assert_eq!(short_decimal("1234567890123456"), None);
        assert_eq!(short_decimal("0.000000000000001"), None);
    }

    #[test]
    fn nesting_is_limited_without_overflowing_the_stack() {
        let ok = format!("{}A{}", "(".repeat(63), ")".repeat(63));
        assert!(Expr::parse(&ok).is_ok());
        let deep = format!("{}A{}", "(".repeat(65), ")".repeat(65));
        assert!(Expr::parse(&deep).unwrap_err().expected.contains("64"));
        let nots = format!("{}A", "NOT ".repeat(100_000));
        assert!(Expr::parse(&nots).is_err());
        let parens = "(".repeat(1_000_000);
        assert!(Expr::parse(&parens).is_err());
    }

    #[test]
    fn whatever_parses_written_out_parses_again_to_the_same() {
        // Each level: an AND among ORs, which the canonical text puts in parentheses,
        // around a parenthesised OR: one level of the input's nesting, two written out.
        let nested = |levels: usize| {
            format!(
                "{}C = 1{}",
                "A = 1 OR B = 1 AND (".repeat(levels),
                ")".repeat(levels)
            )
        };
        // 32 levels: 32 deep as typed, 2 × 32 - 1 = 63 written.
        let expr = parse(&nested(32));
        assert_eq!(expr.written_depth(), 63);
        assert_eq!(parse(&expr.to_string()), expr);
        // 33 levels: 33 deep as typed, under the limit, but 65 written: refused, or a
        // survey that stored its text could not load it.
        let refused = Expr::parse(&nested(33)).unwrap_err();
        assert!(refused.expected.contains("once each AND"), "{refused}");
        let not = parse(&format!("NOT ({})", nested(31)));
        assert_eq!(not.written_depth(), 63);
        assert_eq!(parse(&not.to_string()), not);
        let written = format!("{}C = 1{}", "(".repeat(65), ")".repeat(65));
        assert!(Expr::parse(&written).is_err());
    }

    #[test]
    fn lists_names_in_order() {
        let expr = parse("F1 OR (A = 1 AND NOT B IN (2)) OR C BETWEEN 1 AND 2");
        let mut names = Vec::new();
        expr.visit_names(&mut |kind, name| names.push((kind, name.to_owned())));
        assert_eq!(
            names,
            vec![
                (NameKind::Code, "F1".into()),
                (NameKind::Variable, "A".into()),
                (NameKind::Variable, "B".into()),
                (NameKind::Variable, "C".into()),
            ]
        );
    }

    fn arb_expr() -> impl Strategy<Value = Expr> {
        let name = "[A-Za-z_][A-Za-z0-9_.]{0,6}".prop_filter("keyword", |n| {
            !["AND", "OR", "NOT", "IN", "BETWEEN"].contains(&n.to_ascii_uppercase().as_str())
        });
        let number =
            (-1000i32..1000, 0u8..4).prop_map(|(n, d)| f64::from(n) / 10f64.powi(i32::from(d)));
        let op = prop_oneof![
            Just(CmpOp::Eq),
            Just(CmpOp::Ne),
            Just(CmpOp::Lt),
            Just(CmpOp::Le),
            Just(CmpOp::Gt),
            Just(CmpOp::Ge)
        ];
        let leaf = prop_oneof![
            Just(Expr::All),
            name.clone().prop_map(Expr::Code),
            (name.clone(), op, number.clone()).prop_map(|(var, op, value)| Expr::Compare {
                var,
                op,
                value
            }),
            (
                name.clone(),
                proptest::collection::vec(number.clone(), 1..4)
            )
                .prop_map(|(var, values)| Expr::In { var, values }),
            (name, number.clone(), number).prop_map(|(var, low, high)| Expr::Between {
                var,
                low,
                high
            }),
        ];
        leaf.prop_recursive(5, 32, 4, |inner| {
            prop_oneof![
                inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
                proptest::collection::vec(inner.clone(), 2..4).prop_map(Expr::And),
                proptest::collection::vec(inner, 2..4).prop_map(Expr::Or),
            ]
        })
    }

    proptest! {
        #[test]
        fn display_round_trips(expr in arb_expr()) {
            let text = expr.to_string();
            prop_assert_eq!(Expr::parse(&text).unwrap(), expr);
        }

        #[test]
        fn never_panics_on_arbitrary_text(text in "\\PC{0,64}") {
            let _ = Expr::parse(&text);
        }

        #[test]
        fn short_numbers_read_as_the_general_parser_reads_them(
            text in "-?[0-9]{1,9}(\\.[0-9]{1,9})?",
        ) {
            let general: f64 = text.parse().unwrap();
            match short_decimal(&text) {
                Some(short) => prop_assert_eq!(short.to_bits(), general.to_bits()),
                None => prop_assert!(text.bytes().filter(u8::is_ascii_digit).count() > 15),
            }
        }
    }
}
