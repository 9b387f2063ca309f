//! Code normalization: the forms models send, turned into the one form the entry scope runs.
//!
//! The entry scope calls the program as a function. Models send that (an async arrow
//! function), but also a function expression or declaration, a bare expression,
//! statements with top-level `await` whose last expression statement is the result,
//! a module whose `export default` is the program, and any of these inside a Markdown
//! code block, with prose around it or not. [`normalize_code`] turns each into a
//! function expression, and says where when nothing fits.
//!
//! # Markdown code blocks
//!
//! A fence is a line of three or more backticks or tildes (any indentation), then an
//! info string of anything (`tsx`, `python`, `js title="x.js"`; for backticks, no
//! backtick), which is never kept. The block ends at a line of at least as many of the
//! same character and nothing else, or, without one, at the end of the code (a closing
//! fence stuck to the last line of code, ```` 1``` ````, is cut too). A fence is taken
//! for Markdown unless the code parses as JavaScript with the fence inside a comment, a
//! string or a template literal (JavaScript that carries Markdown as data). The code
//! may hold one such block, with prose before or after it; two or more are refused.
//! Positions in errors always count in the code as sent, fences and prose included.
//!
//! # `export default`
//!
//! A module is run as the body of the program: its statements run in order in one
//! scope, `export default` marks the program, and after the last statement the program
//! returns the default export, called when it is a function (a function declaration or
//! expression, or any value that is a function when the body ends; a class is returned
//! as it is). So `const base = 10; export default async () => base + 1` gives 11, and
//! `export default { a: 1 }` gives `{ a: 1 }`. A lone default export becomes that
//! function, or `async () => (value)`. `import` and every other `export` are refused:
//! the sandbox loads no modules.

use std::fmt;

use oxc_allocator::Allocator;
use oxc_ast::ast::{ExportDefaultDeclarationKind, Expression, Program, Statement};
use oxc_parser::config::TokensParserConfig;
use oxc_parser::{ParseOptions, Parser};
use oxc_span::{GetSpan, SourceType, Span};

use crate::texts;
use crate::wire::Location;

/// The program written for an empty `code`.
pub const EMPTY_PROGRAM: &str = "async () => {}";

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
    /// Whether the Display names the accepted forms ([`texts::CODE_ACCEPTED_FORMS`]).
    accepted_forms: bool,
    /// Refused for its length: the position says nothing.
    too_long: bool,
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

    /// Where, as an outcome's `location`: none for code refused for its length alone.
    pub fn location(&self) -> Option<Location> {
        (!self.too_long).then(|| Location {
            line: u32::try_from(self.line).unwrap_or(u32::MAX),
            column: u32::try_from(self.column).unwrap_or(u32::MAX),
        })
    }
}

impl fmt::Display for CodeSyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&texts::CODE_SYNTAX_ERROR.fill(&[
            &self.line.to_string(),
            &self.column.to_string(),
            &self.message,
        ]))?;
        // The forms are named after every error where the code fits none of them: the
        // parser's errors and the refusal of several code blocks. The position alone does
        // not tell a model whether it mistyped a token or sent a form the executor does
        // not take, and the sentence costs one line. The refusals that carry their own
        // remedy (too long, `import` or a named `export`) go without it.
        if self.accepted_forms {
            f.write_str(if self.message.ends_with('.') { " " } else { ". " })?;
            f.write_str(texts::CODE_ACCEPTED_FORMS)?;
        }
        Ok(())
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
/// - a module with `export default`: a lone default export is that function, or
///   `async () => (value)`; with other statements, they run first and the program
///   returns the default export, called when it is a function (see the module docs);
///   `import` and named exports are refused;
/// - any of these inside one Markdown code block: a fence of three or more backticks
///   or tildes with any info string (```` ```tsx ````, `~~~`, ```` ````js ````), with
///   prose before or after the block or not;
/// - empty code: `async () => {}`.
///
/// When nothing fits, the error's position counts in the code as sent.
pub fn normalize_code(code: &str) -> Result<String, CodeSyntaxError> {
    normalize_mapped(code).map(|normalized| normalized.source)
}

/// Normalized code with the way back to the code as sent: which bytes of the function
/// expression came from where in `code` (the rest is the normalizer's own wrapping).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Normalized {
    /// The function expression the entry scope calls ([`normalize_code`]'s answer).
    pub source: String,
    /// Runs of `source` copied from the code as sent, in order.
    segments: Vec<Segment>,
}

/// `len` bytes at `at` in the normalized source are the bytes at `from` in the code as sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    at: usize,
    from: usize,
    len: usize,
}

impl Normalized {
    /// The byte offset in the code as sent of byte `offset` of [`Normalized::source`];
    /// `None` inside the normalizer's own wrapping.
    pub fn original_offset(&self, offset: usize) -> Option<usize> {
        let index = self.segments.partition_point(|segment| segment.at <= offset).checked_sub(1)?;
        let segment = self.segments[index];
        (offset < segment.at + segment.len).then(|| segment.from + (offset - segment.at))
    }

    /// [`Normalized::original_offset`], or inside the wrapping, the code's first byte after it.
    pub fn original_offset_from(&self, offset: usize) -> Option<usize> {
        self.original_offset(offset).or_else(|| {
            let next = self.segments.iter().find(|segment| segment.at > offset)?;
            Some(next.from)
        })
    }

    fn wrapper(source: &str) -> Normalized {
        Normalized { source: source.to_owned(), segments: Vec::new() }
    }

    /// Append the normalizer's own text.
    fn push(&mut self, text: &str) {
        self.source.push_str(text);
    }

    /// Append `text[range]`, where `text` starts at byte `base` of the code as sent.
    fn copy(&mut self, text: &str, range: std::ops::Range<usize>, base: usize) {
        let len = range.end - range.start;
        if len > 0 {
            self.segments.push(Segment { at: self.source.len(), from: base + range.start, len });
        }
        self.source.push_str(&text[range]);
    }
}

/// [`normalize_code`] with the way back to the code as sent ([`Normalized`]).
pub fn normalize_mapped(code: &str) -> Result<Normalized, CodeSyntaxError> {
    if code.len() > MAX_CODE_BYTES {
        let message = texts::CODE_TOO_LONG.fill(&[&code.len().to_string(), &MAX_CODE_BYTES.to_string()]);
        return Err(CodeSyntaxError { line: 1, column: 1, message, accepted_forms: false, too_long: true });
    }
    // Code nested 100,000 deep would overflow the caller's stack inside the parser: the
    // parse runs on a stack sized to the code whenever the caller's may be too small.
    on_parser_stack(code.len(), || normalize_on_this_stack(code))
}

/// Run `parse` (a parse of `length` bytes of code) on a stack sized to the code whenever
/// the caller's may be too small.
pub(crate) fn on_parser_stack<R>(length: usize, parse: impl FnOnce() -> R) -> R {
    let needed = PARSER_STACK_BASE + length * PARSER_STACK_PER_BYTE;
    if stacker::remaining_stack().is_some_and(|left| left >= needed) {
        parse()
    } else {
        stacker::grow(needed, parse)
    }
}

fn parse_options() -> ParseOptions {
    ParseOptions { allow_return_outside_function: true, ..ParseOptions::default() }
}

fn normalize_on_this_stack(code: &str) -> Result<Normalized, CodeSyntaxError> {
    let blocks = markdown_blocks(code);
    let (fenced_start, end) = match blocks.as_slice() {
        [] => (0, code.len()),
        [only] => only.body,
        [_, second, ..] => {
            let message = texts::CODE_MANY_BLOCKS.fill(&[&blocks.len().to_string()]);
            return Err(position(code, second.fence, message, true));
        }
    };
    let untrimmed = &code[fenced_start..end];
    let body = untrimmed.trim();
    let start = fenced_start + (untrimmed.len() - untrimmed.trim_start().len());
    if body.is_empty() {
        return Ok(Normalized::wrapper(EMPTY_PROGRAM));
    }
    let mut out = Normalized::default();
    let at = |offset: usize, message: String, accepted_forms: bool| {
        position(code, start + offset, message, accepted_forms)
    };

    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, body, SourceType::mjs()).with_options(parse_options()).parse();
    if let Some(error) = parsed.diagnostics.iter().next() {
        if is_anonymous_function(body) {
            out.copy(body, 0..body.len(), start);
            return Ok(out);
        }
        let offset = error.labels.first().map_or(0, |label| label.offset() as usize);
        return Err(at(offset, error.message.to_string(), true));
    }
    let program = &parsed.program;
    let mut default_export = None;
    for statement in &program.body {
        match statement {
            Statement::ExportDefaultDeclaration(export) if default_export.is_none() => {
                default_export = Some(&**export);
            }
            module if module.is_module_declaration() => {
                return Err(at(module.span().start as usize, texts::CODE_MODULE_SYNTAX.to_owned(), false));
            }
            _ => {}
        }
    }
    // A hashbang line cannot stand inside a function; blank it, keeping offsets.
    let text = match &program.hashbang {
        Some(hashbang) => {
            let cut = hashbang.span.end as usize;
            format!("{}{}", " ".repeat(cut), &body[cut..])
        }
        None => body.to_owned(),
    };
    if let Some(export) = default_export {
        with_default_export(program, export, &text, start, &mut out);
        return Ok(out);
    }
    let range = |span: Span| span.start as usize..span.end as usize;

    if let ([], [only]) = (program.directives.as_slice(), program.body.as_slice()) {
        match only {
            Statement::ExpressionStatement(statement) => {
                if let Expression::ArrowFunctionExpression(_) | Expression::FunctionExpression(_) =
                    statement.expression.without_parentheses()
                {
                    out.copy(&text, range(statement.expression.span()), start);
                    return Ok(out);
                }
            }
            Statement::FunctionDeclaration(function) => {
                out.copy(&text, range(function.span), start);
                return Ok(out);
            }
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
    out.push("async () => {\n");
    match last_expression {
        Some((statement, expression)) => {
            out.copy(&text, 0..statement.start as usize, start);
            out.push("return (");
            out.copy(&text, range(expression), start);
            out.push(");");
            out.copy(&text, statement.end as usize..text.len(), start);
        }
        None => out.copy(&text, 0..text.len(), start),
    }
    out.push("\n}");
    Ok(out)
}

/// The program of a module whose default export is `export` (see the module docs).
fn with_default_export(
    program: &Program<'_>,
    export: &oxc_ast::ast::ExportDefaultDeclaration<'_>,
    text: &str,
    base: usize,
    out: &mut Normalized,
) {
    let range = |span: Span| span.start as usize..span.end as usize;
    // What the default export is: its source, the name a declaration binds, and
    // whether it is a function for sure, a class, or a value known when the body ends.
    enum Kind {
        Function,
        Class,
        Value,
    }
    let (declared, name, kind) = match &export.declaration {
        ExportDefaultDeclarationKind::FunctionDeclaration(function) => {
            (function.span, function.id.as_ref().map(|id| id.name.as_str()), Kind::Function)
        }
        ExportDefaultDeclarationKind::ClassDeclaration(class) => {
            (class.span, class.id.as_ref().map(|id| id.name.as_str()), Kind::Class)
        }
        declaration => {
            let kind = match declaration.as_expression().map(Expression::without_parentheses) {
                Some(Expression::ArrowFunctionExpression(_) | Expression::FunctionExpression(_)) => {
                    Kind::Function
                }
                Some(Expression::ClassExpression(_)) => Kind::Class,
                _ => Kind::Value,
            };
            (declaration.span(), None, kind)
        }
    };

    if let ([], [_]) = (program.directives.as_slice(), program.body.as_slice()) {
        match kind {
            Kind::Function => out.copy(text, range(declared), base),
            Kind::Class | Kind::Value => {
                out.push("async () => (");
                out.copy(text, range(declared), base);
                out.push(")");
            }
        }
        return;
    }

    // A declaration keeps its name, in scope for the statements around it; anything
    // else is bound to a name the code does not use.
    // The binding: `None` for a declaration (kept as written), or the fresh name.
    let (fresh, name) = match name {
        Some(name) => (None, name.to_owned()),
        None => {
            let mut fresh = String::from("__default");
            while text.contains(&fresh) {
                fresh.push('_');
            }
            (Some(fresh.clone()), fresh)
        }
    };
    let result = match kind {
        Kind::Function => format!("{name}()"),
        Kind::Class => name,
        Kind::Value => format!("typeof {name} === \"function\" ? {name}() : {name}"),
    };
    out.push("async () => {\n");
    out.copy(text, 0..export.span.start as usize, base);
    match &fresh {
        Some(fresh) => {
            out.push(&format!("const {fresh} = "));
            out.copy(text, range(declared), base);
            out.push(";");
        }
        None => out.copy(text, range(declared), base),
    }
    out.copy(text, export.span.end as usize..text.len(), base);
    out.push(&format!("\nreturn ({result});\n}}"));
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

/// A fenced code block: where its opening fence starts, and the byte range inside.
struct Block {
    fence: usize,
    body: (usize, usize),
}

/// The Markdown code blocks of `code`: every fenced block, unless `code` parses as
/// JavaScript with that block's opening fence inside a comment, a string or a
/// template literal (JavaScript carrying Markdown as data).
fn markdown_blocks(code: &str) -> Vec<Block> {
    let blocks = fenced_blocks(code);
    if blocks.is_empty() {
        return blocks;
    }
    // Tokens are read only from code that parses: oxc's lexer may stop short of the end
    // of code that does not (a debug assertion in 0.146).
    let allocator = Allocator::default();
    let plain = Parser::new(&allocator, code, SourceType::mjs()).with_options(parse_options()).parse();
    if !plain.diagnostics.is_empty() {
        return blocks;
    }
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, code, SourceType::mjs())
        .with_options(parse_options())
        .with_config(TokensParserConfig)
        .parse();
    // The fence's first character begins a token: the backticks or tildes are code
    // (template delimiters, `~` operators), so the fence is Markdown after all.
    let begins_token =
        |offset: usize| parsed.tokens.binary_search_by_key(&(offset as u32), |token| token.start()).is_ok();
    blocks.into_iter().filter(|block| begins_token(block.fence)).collect()
}

/// Every fenced code block of `code`, CommonMark's way (any indentation allowed).
fn fenced_blocks(code: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = lines(code);
    while let Some((line_start, line)) = lines.next() {
        let Some((fence, marker, length)) = opening_fence(line) else { continue };
        let body_start = line_start + line.len();
        let mut body_end = None;
        for (start, line) in lines.by_ref() {
            if is_closing_fence(line, marker, length) {
                body_end = Some(start);
                break;
            }
        }
        let body_end = body_end.unwrap_or_else(|| {
            // No closing line: the block runs to the end, less a closing fence stuck
            // to its last line (`async () => 1```).
            let inside = code[body_start..].trim_end();
            let run = inside.len() - inside.trim_end_matches(marker).len();
            body_start + if run >= length { inside.len() - run } else { code.len() - body_start }
        });
        blocks.push(Block { fence: line_start + fence, body: (body_start, body_end) });
    }
    blocks
}

/// The lines of `code` with their byte offsets, line ends included.
fn lines(code: &str) -> impl Iterator<Item = (usize, &str)> {
    code.split_inclusive('\n').scan(0, |offset, line| {
        let start = *offset;
        *offset += line.len();
        Some((start, line))
    })
}

/// An opening fence: its offset in the line, its character, and its length.
fn opening_fence(line: &str) -> Option<(usize, char, usize)> {
    let text = line.trim_start_matches([' ', '\t']);
    let marker = text.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let length = text.len() - text.trim_start_matches(marker).len();
    let info = &text[length..];
    (length >= 3 && !(marker == '`' && info.contains('`'))).then_some((
        line.len() - text.len(),
        marker,
        length,
    ))
}

/// A closing fence for an opening one of `length` `marker`s.
fn is_closing_fence(line: &str, marker: char, length: usize) -> bool {
    let text = line.trim_start_matches([' ', '\t']);
    let rest = text.trim_start_matches(marker);
    text.len() - rest.len() >= length && rest.trim().is_empty()
}

fn position(code: &str, offset: usize, message: String, accepted_forms: bool) -> CodeSyntaxError {
    let offset = offset.min(code.len());
    let before = code.get(..offset).unwrap_or(code);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    CodeSyntaxError { line, column, message, accepted_forms, too_long: false }
}
