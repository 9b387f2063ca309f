//! Code normalization: the forms models send, turned into the one form the entry scope runs.
//!
//! The entry scope calls the program as a function. Models send that (an async arrow
//! function), but also a function expression or declaration, a bare expression,
//! statements with top-level `await` whose last expression statement is the result,
//! and any of these inside a Markdown code fence. [`normalize_code`] turns each into a
//! function expression, and says where when nothing fits.

use std::fmt;

use oxc_allocator::Allocator;
use oxc_ast::ast::{Expression, Statement};
use oxc_parser::{ParseOptions, Parser};
use oxc_span::{GetSpan, SourceType};

use crate::texts;

/// The program written for an empty `code`.
pub const EMPTY_PROGRAM: &str = "async () => {}";

/// Languages a Markdown fence may name around the code (none at all is fine too).
pub const FENCE_LANGUAGES: &[&str] = &["js", "javascript", "ts", "typescript"];

/// The longest code accepted, in bytes: parsing is recursive, and its stack is sized to
/// the code (below), so the bound keeps that stack within reason.
pub const MAX_CODE_BYTES: usize = 1 << 20;

/// Stack the parser may need per byte of code: one nesting level (`(`, `[`, `!`, `a ?`,
/// `x =>`) costs at most this much in a debug build.
const PARSER_STACK_PER_BYTE: usize = 2048;

/// Stack the parser needs however short the code.
const PARSER_STACK_BASE: usize = 256 * 1024;

/// Code that fits no accepted form; its Display says where and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeSyntaxError {
    line: usize,
    column: usize,
    message: String,
}

impl CodeSyntaxError {
    /// The 1-based line in the code as sent (fence included).
    pub fn line(&self) -> usize {
        self.line
    }

    /// The 1-based column, in characters.
    pub fn column(&self) -> usize {
        self.column
    }

    /// What is wrong there.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for CodeSyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&texts::CODE_SYNTAX_ERROR.fill(&[
            &self.line.to_string(),
            &self.column.to_string(),
            &self.message,
        ]))
    }
}

impl std::error::Error for CodeSyntaxError {}

/// Turn `code` into the source of a function expression the entry scope calls.
///
/// - an arrow function or function expression: as it is;
/// - a lone function declaration: that function;
/// - statements (top-level `await` and `return` allowed): the body of an async arrow
///   function, the last statement returned when it is an expression statement (a bare
///   expression is the one-statement case);
/// - any of these inside a Markdown fence (```` ```js ````, `javascript`, `ts`,
///   `typescript` or no language);
/// - empty code: `async () => {}`.
pub fn normalize_code(code: &str) -> Result<String, CodeSyntaxError> {
    if code.len() > MAX_CODE_BYTES {
        let message = texts::CODE_TOO_LONG.fill(&[&code.len().to_string(), &MAX_CODE_BYTES.to_string()]);
        return Err(CodeSyntaxError { line: 1, column: 1, message });
    }
    // Code nested 100,000 deep would overflow the caller's stack inside the parser: the
    // parse runs on a stack sized to the code whenever the caller's may be too small.
    let needed = PARSER_STACK_BASE + code.len() * PARSER_STACK_PER_BYTE;
    if stacker::remaining_stack().is_some_and(|left| left >= needed) {
        normalize_on_this_stack(code)
    } else {
        stacker::grow(needed, || normalize_on_this_stack(code))
    }
}

fn normalize_on_this_stack(code: &str) -> Result<String, CodeSyntaxError> {
    let (fenced_start, end) = unfence(code);
    let untrimmed = &code[fenced_start..end];
    let body = untrimmed.trim();
    let start = fenced_start + (untrimmed.len() - untrimmed.trim_start().len());
    if body.is_empty() {
        return Ok(EMPTY_PROGRAM.to_owned());
    }
    let at = |offset: usize, message: String| position(code, start + offset, message);

    let allocator = Allocator::default();
    let options = ParseOptions { allow_return_outside_function: true, ..ParseOptions::default() };
    let parsed = Parser::new(&allocator, body, SourceType::mjs()).with_options(options).parse();
    if let Some(error) = parsed.diagnostics.iter().next() {
        if is_anonymous_function(body) {
            return Ok(body.to_owned());
        }
        let offset = error.labels.first().map_or(0, |label| label.offset() as usize);
        return Err(at(offset, error.message.to_string()));
    }
    let program = &parsed.program;
    if let Some(module) = program.body.iter().find(|s| s.is_module_declaration()) {
        return Err(at(module.span().start as usize, texts::CODE_MODULE_SYNTAX.to_owned()));
    }
    // A hashbang line cannot stand inside a function; blank it, keeping offsets.
    let text = match &program.hashbang {
        Some(hashbang) => {
            let cut = hashbang.span.end as usize;
            format!("{}{}", " ".repeat(cut), &body[cut..])
        }
        None => body.to_owned(),
    };
    let slice = |span: oxc_span::Span| &text[span.start as usize..span.end as usize];

    if let ([], [only]) = (program.directives.as_slice(), program.body.as_slice()) {
        match only {
            Statement::ExpressionStatement(statement) => {
                if let Expression::ArrowFunctionExpression(_) | Expression::FunctionExpression(_) =
                    statement.expression.without_parentheses()
                {
                    return Ok(slice(statement.expression.span()).to_owned());
                }
            }
            Statement::FunctionDeclaration(function) => return Ok(slice(function.span).to_owned()),
            _ => {}
        }
    }

    let last_expression = match program.body.last() {
        Some(Statement::ExpressionStatement(statement)) => {
            Some((statement.span, statement.expression.span()))
        }
        Some(_) => None,
        // Only string literals: the last one is a directive, and the result.
        None => program.directives.last().map(|d| (d.span, d.expression.span)),
    };
    Ok(match last_expression {
        Some((statement, expression)) => format!(
            "async () => {{\n{}return ({});{}\n}}",
            &text[..statement.start as usize],
            slice(expression),
            &text[statement.end as usize..],
        ),
        None => format!("async () => {{\n{text}\n}}"),
    })
}

/// Whether `body` is an anonymous function expression, which cannot stand as a statement.
fn is_anonymous_function(body: &str) -> bool {
    let allocator = Allocator::default();
    let wrapped = format!("(\n{body}\n)");
    let parsed = Parser::new(&allocator, &wrapped, SourceType::mjs()).parse();
    parsed.diagnostics.is_empty()
        && matches!(
            parsed.program.body.as_slice(),
            [Statement::ExpressionStatement(statement)]
                if matches!(statement.expression.without_parentheses(), Expression::FunctionExpression(_))
        )
}

/// The byte range of the code inside a Markdown fence, or all of it.
fn unfence(code: &str) -> (usize, usize) {
    let leading = code.len() - code.trim_start().len();
    let rest = &code[leading..];
    let Some(after_ticks) = rest.strip_prefix("```") else {
        return (0, code.len());
    };
    let line_end = after_ticks.find('\n').unwrap_or(after_ticks.len());
    let language = after_ticks[..line_end].trim();
    if !language.is_empty() && !FENCE_LANGUAGES.iter().any(|l| l.eq_ignore_ascii_case(language)) {
        return (0, code.len());
    }
    let start = (leading + 3 + line_end + 1).min(code.len());
    let inner = &code[start..];
    let end = match inner.rfind("```") {
        Some(close) if inner[close + 3..].trim().is_empty() => start + close,
        _ => code.len(),
    };
    (start, end)
}

fn position(code: &str, offset: usize, message: String) -> CodeSyntaxError {
    let offset = offset.min(code.len());
    let before = code.get(..offset).unwrap_or(code);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    CodeSyntaxError { line, column, message }
}
