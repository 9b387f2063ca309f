//! Locations: a place an engine reports in the entry scope, turned into a place in the
//! code as the model sent it.
//!
//! An engine says where an error arose as a line and column of the script it ran (the
//! entry scope). [`ProgramMap::locate`] takes that back through the entry scope's
//! wrapping and the normalizer's ([`Normalized`]) to a [`Location`] in the code as sent.
//!
//! Engines do not point at the same token for the same fault: for `new Error('x')` V8
//! points at `new` and QuickJS at `Error`; for `o.x` on a null `o`, V8 at `x` and QuickJS
//! (patched, `vendor/rquickjs-sys/PATCHES.md`) at `x` too, but for an unknown name V8 at
//! the statement and QuickJS at the name. So a place is settled on the syntax, the same
//! way for every engine, within the function that holds it: the innermost call, `new`,
//! member access, assignment or destructuring around it stands for it, a call at its
//! callee's name (`f` in `o.f()`), the others at their start; a place in none of them,
//! or at a name read, is its statement's start (an arrow's expression body is one).

use oxc_allocator::Allocator;
use oxc_ast::ast::{
    ArrayAssignmentTarget, ArrayPattern, ArrowFunctionExpression, AssignmentExpression, CallExpression,
    Expression, Function, IdentifierReference, MemberExpression, NewExpression, ObjectAssignmentTarget,
    ObjectPattern, Statement, VariableDeclarator,
};
use oxc_ast_visit::{Visit, walk};
use oxc_parser::Parser;
use oxc_span::{GetSpan, SourceType, Span};
use oxc_syntax::scope::ScopeFlags;

use crate::normalize::{Normalized, on_parser_stack};
use crate::wire::Location;

/// How an engine counts a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnUnit {
    /// 1-based, in bytes of UTF-8 (QuickJS).
    Utf8Bytes,
    /// 1-based, in UTF-16 code units (V8, and JavaScript's own string indices).
    Utf16Units,
}

/// The program's place in its entry scope, and the way back to the code as sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramMap {
    code: String,
    normalized: Normalized,
    /// The 1-based line of the entry scope at whose first column the program begins.
    first_line: u32,
}

impl ProgramMap {
    pub(crate) fn new(code: &str, normalized: Normalized, first_line: u32) -> ProgramMap {
        ProgramMap { code: code.to_owned(), normalized, first_line }
    }

    /// The place in the code as sent of `line`:`column` (1-based, `unit`) of the entry
    /// scope; `None` outside the program (a provider's source, the wrapping).
    pub fn locate(&self, line: u32, column: u32, unit: ColumnUnit) -> Option<Location> {
        let source = &self.normalized.source;
        let index = usize::try_from(line.checked_sub(self.first_line)?).ok()?;
        let (start, text) = lines(source).nth(index)?;
        let offset = start + column_offset(text, column.checked_sub(1)?, unit)?;
        let snapped = snap(source, offset);
        // A statement the normalizer wrapped (`return (` before the last expression)
        // begins where the code's own text does.
        let original = self.normalized.original_offset_from(snapped)?;
        Some(location(&self.code, original))
    }
}

/// The lines of `text` with their byte offsets, line ends included.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split_inclusive('\n').scan(0, |offset, line| {
        let start = *offset;
        *offset += line.len();
        Some((start, line))
    })
}

/// The byte offset in `line` of the 0-based column `column`, or `None` past its end.
fn column_offset(line: &str, column: u32, unit: ColumnUnit) -> Option<usize> {
    let column = usize::try_from(column).ok()?;
    let mut counted = 0;
    for (offset, c) in line.char_indices() {
        if counted >= column {
            return Some(offset);
        }
        counted += match unit {
            ColumnUnit::Utf8Bytes => c.len_utf8(),
            ColumnUnit::Utf16Units => c.len_utf16(),
        };
    }
    (counted == column).then_some(line.len())
}

/// The 1-based line and column (in characters) of byte `offset` of `code`.
fn location(code: &str, offset: usize) -> Location {
    let before = code.get(..offset).unwrap_or(code);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Location {
        line: u32::try_from(line).unwrap_or(u32::MAX),
        column: u32::try_from(column).unwrap_or(u32::MAX),
    }
}

/// The point that stands for byte `offset` of `program` (a function expression), by the
/// rules of the module docs; `offset` itself where the program does not parse.
fn snap(program: &str, offset: usize) -> usize {
    on_parser_stack(program.len(), || {
        let wrapped = format!("({program})");
        let allocator = Allocator::default();
        let parsed = Parser::new(&allocator, &wrapped, SourceType::mjs()).parse();
        if !parsed.diagnostics.is_empty() {
            return offset;
        }
        let Ok(at) = u32::try_from(offset + 1) else { return offset };
        let mut snap = Snap { at, point: None, statement: None, at_name: false, in_callee: false };
        snap.visit_program(&parsed.program);
        let point = if snap.at_name { snap.statement } else { snap.point.or(snap.statement) };
        point.map_or(offset, |point| point as usize - 1)
    })
}

/// Walks down to `at`, keeping what stands for it in the function that holds it.
struct Snap {
    at: u32,
    /// The innermost call, `new`, member access, assignment or pattern holding `at`.
    point: Option<u32>,
    /// The innermost statement holding `at` (an arrow's expression body is one).
    statement: Option<u32>,
    /// `at` is where a name is read (outside a callee): V8 places an unknown name at
    /// the statement, QuickJS at the name, so the statement stands for it.
    at_name: bool,
    /// Inside the callee of a call or `new`: a member access there is the call's.
    in_callee: bool,
}

impl Snap {
    fn holds(&self, span: Span) -> bool {
        span.start <= self.at && self.at < span.end
    }

    /// Visit a callee: member accesses in it do not stand for themselves.
    fn callee(&mut self, callee: &Expression<'_>) {
        let outer = std::mem::replace(&mut self.in_callee, true);
        self.visit_expression(callee);
        self.in_callee = outer;
    }

    /// Visit what is no callee (arguments, operands): its member accesses stand for themselves.
    fn outside_callee(&mut self, walk: impl FnOnce(&mut Self)) {
        let outer = std::mem::replace(&mut self.in_callee, false);
        walk(self);
        self.in_callee = outer;
    }

    /// Visit a function holding `at`: the places outside it are another frame's.
    fn function(&mut self, walk: impl FnOnce(&mut Self)) {
        self.point = None;
        self.statement = None;
        self.outside_callee(walk);
    }
}

impl<'a> Visit<'a> for Snap {
    fn visit_statement(&mut self, statement: &Statement<'a>) {
        if self.holds(statement.span()) {
            self.statement = Some(statement.span().start);
            walk::walk_statement(self, statement);
        }
    }

    fn visit_identifier_reference(&mut self, name: &IdentifierReference<'a>) {
        if name.span.start == self.at && !self.in_callee {
            self.at_name = true;
        }
    }

    fn visit_call_expression(&mut self, call: &CallExpression<'a>) {
        if !self.holds(call.span) {
            return;
        }
        self.point = Some(match call.callee.without_parentheses() {
            Expression::StaticMemberExpression(member) => member.property.span.start,
            Expression::PrivateFieldExpression(member) => member.field.span.start,
            callee => callee.span().start,
        });
        self.callee(&call.callee);
        self.outside_callee(|snap| snap.visit_arguments(&call.arguments));
    }

    fn visit_new_expression(&mut self, new: &NewExpression<'a>) {
        if !self.holds(new.span) {
            return;
        }
        self.point = Some(new.span.start);
        self.callee(&new.callee);
        self.outside_callee(|snap| snap.visit_arguments(&new.arguments));
    }

    fn visit_member_expression(&mut self, member: &MemberExpression<'a>) {
        if !self.holds(member.span()) {
            return;
        }
        if !self.in_callee {
            self.point = Some(member.span().start);
        }
        walk::walk_member_expression(self, member);
    }

    fn visit_variable_declarator(&mut self, declarator: &VariableDeclarator<'a>) {
        if !self.holds(declarator.span) {
            return;
        }
        // Destructuring a value that does not fit: V8 points at the value, QuickJS at the pattern.
        if declarator.id.is_destructuring_pattern() {
            self.point = Some(declarator.span.start);
        }
        self.outside_callee(|snap| walk::walk_variable_declarator(snap, declarator));
    }

    fn visit_object_pattern(&mut self, pattern: &ObjectPattern<'a>) {
        if self.holds(pattern.span) {
            self.point = Some(pattern.span.start);
            self.outside_callee(|snap| walk::walk_object_pattern(snap, pattern));
        }
    }

    fn visit_array_pattern(&mut self, pattern: &ArrayPattern<'a>) {
        if self.holds(pattern.span) {
            self.point = Some(pattern.span.start);
            self.outside_callee(|snap| walk::walk_array_pattern(snap, pattern));
        }
    }

    fn visit_object_assignment_target(&mut self, pattern: &ObjectAssignmentTarget<'a>) {
        if self.holds(pattern.span) {
            self.point = Some(pattern.span.start);
            self.outside_callee(|snap| walk::walk_object_assignment_target(snap, pattern));
        }
    }

    fn visit_array_assignment_target(&mut self, pattern: &ArrayAssignmentTarget<'a>) {
        if self.holds(pattern.span) {
            self.point = Some(pattern.span.start);
            self.outside_callee(|snap| walk::walk_array_assignment_target(snap, pattern));
        }
    }

    fn visit_assignment_expression(&mut self, assignment: &AssignmentExpression<'a>) {
        if self.holds(assignment.span) {
            self.point = Some(assignment.span.start);
            self.outside_callee(|snap| walk::walk_assignment_expression(snap, assignment));
        }
    }

    fn visit_function(&mut self, function: &Function<'a>, flags: ScopeFlags) {
        if self.holds(function.span) {
            self.function(|snap| walk::walk_function(snap, function, flags));
        }
    }

    fn visit_arrow_function_expression(&mut self, arrow: &ArrowFunctionExpression<'a>) {
        if self.holds(arrow.span) {
            self.function(|snap| walk::walk_arrow_function_expression(snap, arrow));
        }
    }
}
