//! The errors of the engine language, one enum per stage: [`SyntaxErrorKind`] (lexer, parser,
//! region markers), [`ProgramErrorKind`] (names, arity, recursion), [`Violation`] (the policy),
//! gathered into [`RestrictError`] by `check`; then [`CompileErrorKind`] and [`RunErrorKind`]
//! for the compiler and the interpreter. Every one carries a line:col and a source excerpt.

use std::fmt;

use super::diagnostic::{Excerpt, Located, Pos, PrivateLines};
use super::marker::RegionKind;
use crate::error::{Diagnose, Exit};
use crate::kernels::KernelError;

/// A lexer, parser or region-marker error.
pub type SyntaxError = Located<SyntaxErrorKind>;
/// A name, arity or call-graph error.
pub type ProgramError = Located<ProgramErrorKind>;
/// A compile-time kind or shape error against the runner's inputs.
pub type CompileError = Located<CompileErrorKind>;
/// An error while running a plan.
pub type RunError = Located<RunErrorKind>;

/// Why the source is not a well-formed engine.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SyntaxErrorKind {
    /// The source exceeds the size limit.
    #[error("source is {size} bytes, more than the limit of {limit}")]
    TooLarge {
        /// Bytes found.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A byte outside ASCII, anywhere (comments included).
    #[error("non-ASCII character {found}; engine source is ASCII only, comments included")]
    NonAscii {
        /// The character (or `byte 0x..` when the input is not UTF-8).
        found: String,
    },
    /// A control character other than tab, line feed, or a CR directly before a line feed.
    #[error(
        "control character 0x{byte:02x}; only tab, line feed and CRLF line endings are allowed"
    )]
    ControlChar {
        /// The byte.
        byte: u8,
    },
    /// A character that starts no token.
    #[error("unexpected character `{ch}`")]
    UnexpectedChar {
        /// The character.
        ch: char,
    },
    /// A malformed or out-of-range number literal.
    #[error("malformed number `{text}`: {why}")]
    BadNumber {
        /// The literal as written (cut to 64 characters).
        text: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// An identifier longer than the limit.
    #[error("identifier is {len} characters long, more than the limit of {limit}")]
    IdentTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// More tokens than the limit.
    #[error("more than {limit} tokens")]
    TooManyTokens {
        /// The limit.
        limit: usize,
    },
    /// Expressions nested deeper than the limit.
    #[error("expressions nest deeper than {limit} levels")]
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// More function definitions or parameters or arguments than a limit.
    #[error("more than {limit} {what}")]
    TooMany {
        /// What there are too many of.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// The parser expected something else.
    #[error("expected {expected}, found {found}")]
    Expected {
        /// What would have been accepted.
        expected: &'static str,
        /// What was there.
        found: String,
    },
    /// A comment containing `@` that is not exactly one of the four markers.
    #[error(
        "malformed region marker `{text}`: `@` in a comment is reserved for the markers \
         `// @private obfuscate`, `// @private hide`, `// @end obfuscate`, `// @end hide`"
    )]
    MalformedMarker {
        /// The comment (cut to 64 characters).
        text: String,
    },
    /// A marker sharing its line with code.
    #[error("region marker must be alone on its line")]
    MarkerNotAlone,
    /// An `@end` with no region open.
    #[error("`// @end {kind}` closes no open region")]
    UnopenedRegion {
        /// The kind named by the marker.
        kind: RegionKind,
    },
    /// An `@end` naming another kind than the open region.
    #[error("`// @end {found}` but the open region (line {open_line}) is {open}")]
    MismatchedEnd {
        /// The kind named by the `@end`.
        found: RegionKind,
        /// The kind of the open region.
        open: RegionKind,
        /// Where the open region starts.
        open_line: u32,
    },
    /// A region still open at the end of the source.
    #[error("{kind} region is never closed; add `// @end {kind}`")]
    UnclosedRegion {
        /// Its kind.
        kind: RegionKind,
    },
    /// A region opened inside one it may not nest in.
    #[error(
        "{inner} region inside the {outer} region opened at line {outer_line}; only a hide \
         region may nest, and only inside an obfuscate region"
    )]
    BadNesting {
        /// The kind being opened.
        inner: RegionKind,
        /// The kind already open.
        outer: RegionKind,
        /// Where the outer region starts.
        outer_line: u32,
    },
    /// A region boundary falling inside a construct.
    #[error(
        "region boundary splits {what}; a region covers whole function definitions or whole \
         statements of one function body"
    )]
    SplitsConstruct {
        /// The construct split, e.g. "function `f` (lines 3-9)".
        what: String,
    },
    /// An error in an engine with private regions, as anyone but the author sees it: only its
    /// kind.
    #[error("{0} (details withheld: the engine has private regions; the author sees them with `runner restrict --show-private`)")]
    Withheld(&'static str),
}

impl SyntaxErrorKind {
    /// What kind of problem this is, in words that quote nothing from the source.
    pub fn label(&self) -> &'static str {
        match self {
            SyntaxErrorKind::TooLarge { .. } => "the source is too large",
            SyntaxErrorKind::NonAscii { .. } => "a non-ASCII character",
            SyntaxErrorKind::ControlChar { .. } => "a control character",
            SyntaxErrorKind::UnexpectedChar { .. } => "an unexpected character",
            SyntaxErrorKind::BadNumber { .. } => "a malformed number",
            SyntaxErrorKind::IdentTooLong { .. } => "an identifier that is too long",
            SyntaxErrorKind::TooManyTokens { .. } => "too many tokens",
            SyntaxErrorKind::TooDeep { .. } => "expressions nested too deep",
            SyntaxErrorKind::TooMany { .. } => "too many definitions or arguments",
            SyntaxErrorKind::Expected { .. } => "a syntax error",
            SyntaxErrorKind::MalformedMarker { .. } => "a malformed region marker",
            SyntaxErrorKind::MarkerNotAlone => "a region marker that is not alone on its line",
            SyntaxErrorKind::UnopenedRegion { .. } => "an `@end` marker that closes no region",
            SyntaxErrorKind::MismatchedEnd { .. } => "an `@end` marker of the wrong kind",
            SyntaxErrorKind::UnclosedRegion { .. } => "a region that is never closed",
            SyntaxErrorKind::BadNesting { .. } => "regions nested in a way that is not allowed",
            SyntaxErrorKind::SplitsConstruct { .. } => "a region boundary inside a construct",
            SyntaxErrorKind::Withheld(label) => label,
        }
    }
}

/// Why a well-formed engine is not a valid program.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ProgramErrorKind {
    /// A call to a name that is neither a user function nor a built-in.
    #[error("unknown function `{name}`")]
    UnknownFunction {
        /// The name called.
        name: String,
    },
    /// A name used as a value that no `let` or parameter binds.
    #[error("unknown variable `{name}`")]
    UnknownVariable {
        /// The name.
        name: String,
    },
    /// A function name used as a value.
    #[error("`{name}` is a function, not a value; functions can only be called (or passed as scan's body)")]
    FunctionAsValue {
        /// The name.
        name: String,
    },
    /// A call with the wrong number of arguments.
    #[error("`{name}` takes {expected} argument(s), given {found}")]
    WrongArity {
        /// The function.
        name: String,
        /// Arguments it takes.
        expected: usize,
        /// Arguments given.
        found: usize,
    },
    /// Two functions with one name.
    #[error("function `{name}` is already defined at {first}")]
    DuplicateFunction {
        /// The name.
        name: String,
        /// The first definition.
        first: Pos,
    },
    /// A user function named like a built-in (or `scan`).
    #[error("function `{name}` would shadow the built-in of that name; built-in names cannot be redefined")]
    ShadowsBuiltin {
        /// The name.
        name: String,
    },
    /// A `let` or parameter binding the name of a function or built-in.
    #[error("`{name}` names a function; a `let` or parameter cannot bind it")]
    BindsFunctionName {
        /// The name.
        name: String,
    },
    /// Two parameters with one name.
    #[error("parameter `{name}` is declared twice")]
    DuplicateParam {
        /// The name.
        name: String,
    },
    /// `scan`'s first argument is not the name of a user function.
    #[error(
        "scan's first argument must be the name of a user function (the layer body), found {found}"
    )]
    ScanBody {
        /// What was there.
        found: String,
    },
    /// `scan` with fewer than three arguments.
    #[error("scan takes a body, a carry and a stacked list, then any extra arguments for the body; given {found} argument(s)")]
    ScanArgs {
        /// Arguments given.
        found: usize,
    },
    /// A cycle in the call graph (scan bodies included).
    #[error("recursion is not allowed: {cycle}")]
    Recursion {
        /// The cycle, e.g. "`a` calls `b` (4:5), `b` calls `a` (9:12)".
        cycle: String,
    },
    /// A call graph whose plan would make more built-in calls per step than the limit (a
    /// function calling another twice, sixty levels deep, is 2^60 calls).
    #[error("`{name}` would make {calls} built-in calls per step (counting a scan body once), more than the limit of {limit}")]
    TooMuchWork {
        /// The function.
        name: String,
        /// Its calls, saturating at `u64::MAX`.
        calls: u64,
        /// [`super::MAX_CALLS_PER_STEP`].
        limit: u64,
    },
    /// An error in an engine with private regions, as anyone but the author sees it: only its
    /// kind.
    #[error("{0} (details withheld: the engine has private regions; the author sees them with `runner restrict --show-private`)")]
    Withheld(&'static str),
}

impl ProgramErrorKind {
    /// What kind of problem this is, in words that quote nothing from the source.
    pub fn label(&self) -> &'static str {
        match self {
            ProgramErrorKind::UnknownFunction { .. } => "a call to an unknown function",
            ProgramErrorKind::UnknownVariable { .. } => "an unknown variable",
            ProgramErrorKind::FunctionAsValue { .. } => "a function used as a value",
            ProgramErrorKind::WrongArity { .. } => "a call with the wrong number of arguments",
            ProgramErrorKind::DuplicateFunction { .. } => "a function defined twice",
            ProgramErrorKind::ShadowsBuiltin { .. } => "a function named like a built-in",
            ProgramErrorKind::BindsFunctionName { .. } => "a binding named like a function",
            ProgramErrorKind::DuplicateParam { .. } => "a parameter declared twice",
            ProgramErrorKind::ScanBody { .. } => "a scan whose body is not a user function",
            ProgramErrorKind::ScanArgs { .. } => "a scan with the wrong arguments",
            ProgramErrorKind::Recursion { .. } => "recursion",
            ProgramErrorKind::TooMuchWork { .. } => "a call graph with too much work per step",
            ProgramErrorKind::Withheld(label) => label,
        }
    }
}

/// A call in a private region that reaches a built-in the policy does not allow.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// The built-in not allowed.
    pub builtin: String,
    /// When the private call is to a user function: that function, and where the built-in is
    /// called on the way.
    pub via: Option<Via>,
    /// The private call site.
    pub excerpt: Excerpt,
    /// Shown to anyone but the author: the functions on the way and the line are not named.
    pub withheld: bool,
}

/// The path from a private call to a disallowed built-in through user functions.
#[derive(Debug, Clone, PartialEq)]
pub struct Via {
    /// The user function called from the private region.
    pub function: String,
    /// The user function whose body calls the built-in.
    pub caller: String,
    /// Where that call is.
    pub at: Pos,
    /// Whether `function` and `caller` are defined outside private regions (their names are
    /// then public: the owners' view shows them).
    pub public: (bool, bool),
}

impl Violation {
    /// The private call site.
    pub fn pos(&self) -> Pos {
        self.excerpt.pos()
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.via {
            None => write!(
                f,
                "private region calls `{}`, which the policy does not allow",
                self.builtin
            )?,
            Some(via) if self.withheld => {
                let name = |n: &str, public: bool| {
                    if public {
                        format!("`{n}`")
                    } else {
                        "a private function".to_owned()
                    }
                };
                write!(
                    f,
                    "private region calls {}, which reaches `{}` (called in {}), which the \
                     policy does not allow",
                    name(&via.function, via.public.0),
                    self.builtin,
                    name(&via.caller, via.public.1),
                )?
            }
            Some(via) => write!(
                f,
                "private region calls `{}`, which reaches `{}` (called in `{}` at {}), which the \
                 policy does not allow",
                via.function, self.builtin, via.caller, via.at
            )?,
        }
        write!(f, " ({})\n{}", self.excerpt.pos(), self.excerpt)
    }
}

/// Why `check` refused an engine.
#[derive(Debug)]
#[non_exhaustive]
pub enum RestrictError {
    /// The source is not well-formed (lexer, parser, region markers, limits).
    Syntax {
        /// The engine's name (its path).
        origin: String,
        /// The first error.
        error: SyntaxError,
    },
    /// The program is well-formed but invalid (names, arity, recursion); all errors found.
    Program {
        /// The engine's name.
        origin: String,
        /// Every error, in source order.
        errors: Vec<ProgramError>,
    },
    /// Calls in private regions that the policy does not allow; all of them.
    Violations {
        /// The engine's name.
        origin: String,
        /// The policy's name.
        policy: String,
        /// Every violation, in source order.
        violations: Vec<Violation>,
    },
}

impl fmt::Display for RestrictError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestrictError::Syntax { origin, error } => write!(f, "engine {origin}: {error}"),
            RestrictError::Program { origin, errors } => {
                write!(f, "engine {origin} has {} error(s):", errors.len())?;
                for e in errors {
                    write!(f, "\n{e}")?;
                }
                Ok(())
            }
            RestrictError::Violations {
                origin,
                policy,
                violations,
            } => {
                write!(
                    f,
                    "engine {origin}: {} call(s) in private regions are not allowed by policy \
                     {policy}:",
                    violations.len()
                )?;
                for v in violations {
                    write!(f, "\n{v}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for RestrictError {}

impl RestrictError {
    /// The error as anyone but the engine's author may see it. In an engine with private
    /// regions every error keeps its position and kind and loses its message and source line
    /// (a message or a public line can name a private function, which the owners' view shows
    /// only renamed); a violation (always in a private region) keeps the built-in it reaches
    /// and names only public functions on the way. An engine without private regions hides
    /// nothing, so its errors stay whole.
    pub fn withhold_private(self, source: &str) -> RestrictError {
        let private = PrivateLines::scan(source);
        if !private.any() {
            return self;
        }
        // An excerpt of a public line can still hold a private name (a call to a hidden
        // function is renamed in the view, not in the source), so no line is shown.
        let excerpt = |pos: Pos| {
            if private.contains(pos.line) {
                Excerpt::withheld(pos)
            } else {
                Excerpt::omitted(pos)
            }
        };
        match self {
            RestrictError::Syntax { origin, error } => RestrictError::Syntax {
                origin,
                error: Located {
                    kind: SyntaxErrorKind::Withheld(error.kind.label()),
                    excerpt: excerpt(error.pos()),
                },
            },
            RestrictError::Program { origin, errors } => RestrictError::Program {
                origin,
                errors: errors
                    .into_iter()
                    .map(|e| Located {
                        kind: ProgramErrorKind::Withheld(e.kind.label()),
                        excerpt: excerpt(e.pos()),
                    })
                    .collect(),
            },
            RestrictError::Violations {
                origin,
                policy,
                violations,
            } => RestrictError::Violations {
                origin,
                policy,
                violations: violations
                    .into_iter()
                    .map(|v| Violation {
                        excerpt: Excerpt::withheld(v.pos()),
                        withheld: true,
                        ..v
                    })
                    .collect(),
            },
        }
    }
}

impl Diagnose for RestrictError {
    fn exit(&self) -> Exit {
        match self {
            RestrictError::Syntax { .. } | RestrictError::Program { .. } => Exit::BadInput,
            RestrictError::Violations { .. } => Exit::Refused,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            RestrictError::Syntax { .. } | RestrictError::Program { .. } => {
                "fix the engine at the line shown; docs/engine-language.md has the grammar, the \
                 markers and the built-ins"
                    .into()
            }
            RestrictError::Violations { .. } => {
                "call only built-ins in the policy's allow_functions from private regions, or \
                 move the call into public code where owners can read it; widening the policy \
                 needs the owners' approval"
                    .into()
            }
        })
    }
}

/// Why a verified engine cannot be compiled against the runner's inputs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CompileErrorKind {
    /// The entry function does not exist.
    #[error("the engine has no function `{name}` to run")]
    NoEntry {
        /// The entry asked for.
        name: String,
    },
    /// The entry function has a parameter the runner supplies no input for.
    #[error("parameter `{name}` of `{entry}` has no input; the runner supplies {supplied}")]
    MissingInput {
        /// The entry function.
        entry: String,
        /// The parameter.
        name: String,
        /// The inputs supplied.
        supplied: String,
    },
    /// The runner supplies an input the entry function does not take.
    #[error("input `{name}` is not a parameter of `{entry}`")]
    UnusedInput {
        /// The entry function.
        entry: String,
        /// The input.
        name: String,
    },
    /// A value of the wrong kind for an operation.
    #[error("{what} needs {expected}, found {found}")]
    Kind {
        /// The argument or operand, e.g. "argument 2 of `linear`".
        what: String,
        /// The kind it needs.
        expected: String,
        /// The kind found.
        found: String,
    },
    /// An attribute the record does not have.
    #[error("record has no field `{field}`; its fields are {fields}")]
    UnknownField {
        /// The attribute asked for.
        field: String,
        /// The fields it has.
        fields: String,
    },
    /// Shapes that cannot work together, found before running.
    #[error("shape mismatch in `{op}`: {detail}")]
    Shape {
        /// The operation.
        op: String,
        /// What does not fit.
        detail: String,
    },
    /// User functions call each other more deeply than the limit.
    #[error("user functions nest more than {limit} calls deep")]
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// A guarantee of the verifier did not hold (a bug): the plan is refused.
    #[error("internal error: {what}; the verifier should have refused this program")]
    Internal {
        /// What was found.
        what: &'static str,
    },
    /// `scan`'s body returns something other than the carry's kind.
    #[error("scan body `{body}` returns {found} but the carry is {expected}")]
    ScanCarry {
        /// The body.
        body: String,
        /// The carry's kind.
        expected: String,
        /// What the body returns.
        found: String,
    },
    /// An error in an engine with private regions, as the operator sees it: only its kind.
    #[error("{0} (details withheld: the engine has private regions)")]
    Withheld(&'static str),
}

impl CompileErrorKind {
    /// What kind of problem this is, in words that quote nothing from the source.
    pub fn label(&self) -> &'static str {
        match self {
            CompileErrorKind::NoEntry { .. } => "no such entry function",
            CompileErrorKind::MissingInput { .. } => "a parameter with no input",
            CompileErrorKind::UnusedInput { .. } => "an input that is not a parameter",
            CompileErrorKind::Kind { .. } => "a value of the wrong kind",
            CompileErrorKind::UnknownField { .. } => "a record without the field read",
            CompileErrorKind::Shape { .. } => "a shape mismatch",
            CompileErrorKind::TooDeep { .. } => "user functions nested too deep",
            CompileErrorKind::Internal { .. } => "an internal error",
            CompileErrorKind::ScanCarry { .. } => "a scan body whose result is not its carry",
            CompileErrorKind::Withheld(label) => label,
        }
    }
}

impl Diagnose for CompileError {
    fn exit(&self) -> Exit {
        Exit::BadInput
    }
    fn hint(&self) -> Option<String> {
        Some(
            "the engine and the runner's inputs do not fit together; check the model's \
             config against what the engine expects"
                .into(),
        )
    }
}

impl std::error::Error for Located<CompileErrorKind> {}

/// Why running a plan failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RunErrorKind {
    /// The inputs given to `run` do not match those the plan was compiled for.
    #[error(
        "input `{name}` does not match the compiled signature: expected {expected}, found {found}"
    )]
    InputMismatch {
        /// The input.
        name: String,
        /// The type compiled for.
        expected: String,
        /// The type given.
        found: String,
    },
    /// A kernel refused its arguments (usually a shape mismatch).
    #[error("`{op}` failed: {source}")]
    Kernel {
        /// The built-in.
        op: String,
        /// The kernel's error.
        source: Box<KernelError>,
    },
    /// A shape operation whose input does not have the shape it needs.
    #[error("`{op}` failed: {detail}")]
    Shape {
        /// The built-in.
        op: String,
        /// What does not fit.
        detail: String,
    },
    /// A built-in argument out of its range (a negative window, a fractional count).
    #[error("argument {index} of `{op}` is {value}; {why}")]
    BadArgument {
        /// The built-in.
        op: String,
        /// 1-based argument index.
        index: usize,
        /// The value.
        value: String,
        /// The rule.
        why: &'static str,
    },
    /// Scalar arithmetic gave infinity or NaN.
    #[error("scalar arithmetic gave {value}")]
    NotFinite {
        /// The result.
        value: f64,
    },
    /// A value of an unexpected kind reached an operation (inputs changed after compiling).
    #[error("{what} needs {expected}, found {found}")]
    Kind {
        /// The argument or operand.
        what: String,
        /// The kind it needs.
        expected: String,
        /// The kind found.
        found: String,
    },
    /// A guarantee of the compiler did not hold (a bug): the run stops.
    #[error("internal error: {what}")]
    Internal {
        /// What was found.
        what: &'static str,
    },
    /// A record without a field the plan reads.
    #[error("record has no field `{field}`")]
    UnknownField {
        /// The field.
        field: String,
    },
}

impl Diagnose for RunError {
    fn exit(&self) -> Exit {
        Exit::Failure
    }
}

impl std::error::Error for Located<RunErrorKind> {}
