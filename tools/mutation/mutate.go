package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"sort"
	"strings"
)

// A mutant is one small change to one source file: a comparison turned
// round, a condition negated, a +1 dropped, a write left out.
type mutant struct {
	// ID names the mutant stably across unrelated edits of the file:
	// file, function, operator, the original code, and which of that
	// function's identical sites it is.
	ID       string
	File     string // path relative to the repository root
	Func     string
	Operator string
	Line     int
	Original string // the code as it is
	Mutated  string // the code as the mutant has it
	edits    []edit
}

// edit replaces src[off:end] with text.
type edit struct {
	off, end int
	text     string
}

// apply returns src with m's edits.
func (m mutant) apply(src []byte) []byte {
	edits := slices.Clone(m.edits)
	sort.Slice(edits, func(i, j int) bool { return edits[i].off > edits[j].off })
	out := slices.Clone(src)
	for _, e := range edits {
		out = append(out[:e.off:e.off], append([]byte(e.text), out[e.end:]...)...)
	}
	return out
}

// Operators, as they are named in IDs and the report.
const (
	opBoundary   = "boundary"    // < <=, > >=
	opNegateCmp  = "negate-cmp"  // == !=, < >=, > <=
	opLogical    = "and-or"      // && ||
	opDropNot    = "drop-not"    // !x -> x
	opNegateCond = "negate-cond" // if c -> if !(c), for a c that is not a comparison
	opOffByOne   = "off-by-one"  // x+1 -> x, x-1 -> x
	opMinMax     = "min-max"     // max <-> min
	opBool       = "flip-bool"   // true <-> false
	opDropWrite  = "drop-write"  // an assignment, ++/--, or a call statement left out
	opArithmetic = "plus-minus"  // a+b <-> a-b (not +1/-1)
)

// dropped stands in for a statement a mutant leaves out.
const dropped = "_ = 0"

var (
	boundary = map[token.Token]token.Token{token.LSS: token.LEQ, token.LEQ: token.LSS, token.GTR: token.GEQ, token.GEQ: token.GTR}
	negation = map[token.Token]token.Token{token.EQL: token.NEQ, token.NEQ: token.EQL, token.LSS: token.GEQ, token.GEQ: token.LSS, token.GTR: token.LEQ, token.LEQ: token.GTR}
)

// scope says which functions of a file are mutated.
type scope struct {
	// skip names functions left alone (a method as "Type.Method" or its
	// bare name): start-up and shutdown, which the suite cannot observe
	// beyond the plugin starting.
	skip map[string]bool
}

func (s scope) includes(name, method string) bool { return !s.skip[name] && !s.skip[method] }

// mutants lists every mutant of the Go source src (file is its path, for
// IDs and the report) in the functions scope includes.
func mutants(file string, src []byte, sc scope) ([]mutant, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []mutant
	seen := map[string]int{}
	text := func(n ast.Node) string {
		return string(src[fset.Position(n.Pos()).Offset:fset.Position(n.End()).Offset])
	}
	off := func(p token.Pos) int { return fset.Position(p).Offset }
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		name, method := fn.Name.Name, fn.Name.Name
		if fn.Recv != nil && len(fn.Recv.List) == 1 {
			method = recvType(fn.Recv.List[0].Type) + "." + fn.Name.Name
		}
		if !sc.includes(name, method) {
			continue
		}
		add := func(op string, at ast.Node, orig string, edits ...edit) {
			mutated := string(mutant{edits: shift(edits, off(at.Pos()))}.apply([]byte(orig)))
			key := fmt.Sprintf("%s %s %s %q", file, method, op, oneLine(orig))
			seen[key]++
			out = append(out, mutant{
				ID:   fmt.Sprintf("%s#%d", key, seen[key]),
				File: file, Func: method, Operator: op, Line: fset.Position(at.Pos()).Line,
				Original: orig, Mutated: mutated, edits: edits,
			})
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncLit:
				return true // closures belong to their function
			case *ast.BinaryExpr:
				orig := text(n)
				opAt := off(n.OpPos)
				opEnd := opAt + len(n.Op.String())
				if to, ok := boundary[n.Op]; ok {
					add(opBoundary, n, orig, edit{opAt, opEnd, to.String()})
				}
				if to, ok := negation[n.Op]; ok {
					add(opNegateCmp, n, orig, edit{opAt, opEnd, to.String()})
				}
				switch n.Op {
				case token.LAND:
					add(opLogical, n, orig, edit{opAt, opEnd, "||"})
				case token.LOR:
					add(opLogical, n, orig, edit{opAt, opEnd, "&&"})
				case token.ADD, token.SUB:
					if lit, ok := n.Y.(*ast.BasicLit); ok && lit.Kind == token.INT && lit.Value == "1" {
						// x+1 -> x: drop the operator and the 1.
						add(opOffByOne, n, orig, edit{off(n.X.End()), off(n.Y.End()), ""})
					} else if !isStringy(n) {
						to := "-"
						if n.Op == token.SUB {
							to = "+"
						}
						add(opArithmetic, n, orig, edit{opAt, opEnd, to})
					}
				}
			case *ast.UnaryExpr:
				if n.Op == token.NOT {
					add(opDropNot, n, text(n), edit{off(n.OpPos), off(n.OpPos) + 1, ""})
				}
			case *ast.IfStmt:
				negateCond(n.Cond, text, off, add)
			case *ast.ForStmt:
				if n.Cond != nil {
					negateCond(n.Cond, text, off, add)
				}
			case *ast.CallExpr:
				if id, ok := n.Fun.(*ast.Ident); ok && (id.Name == "max" || id.Name == "min") {
					to := "min"
					if id.Name == "min" {
						to = "max"
					}
					add(opMinMax, n, text(n), edit{off(id.Pos()), off(id.End()), to})
				}
			case *ast.Ident:
				if n.Name == "true" || n.Name == "false" {
					to := "false"
					if n.Name == "false" {
						to = "true"
					}
					add(opBool, n, n.Name, edit{off(n.Pos()), off(n.End()), to})
				}
			case *ast.BlockStmt:
				for _, st := range n.List {
					if droppable(st) {
						add(opDropWrite, st, text(st), edit{off(st.Pos()), off(st.End()), dropped})
					}
				}
			case *ast.CaseClause:
				for _, st := range n.Body {
					if droppable(st) {
						add(opDropWrite, st, text(st), edit{off(st.Pos()), off(st.End()), dropped})
					}
				}
			case *ast.CommClause:
				for _, st := range n.Body {
					if droppable(st) {
						add(opDropWrite, st, text(st), edit{off(st.Pos()), off(st.End()), dropped})
					}
				}
			}
			return true
		})
	}
	return out, nil
}

// negateCond adds a negation of an if or for condition that is not a
// comparison or a negation already (their own operators cover those).
func negateCond(c ast.Expr, text func(ast.Node) string, off func(token.Pos) int, add func(string, ast.Node, string, ...edit)) {
	switch c := c.(type) {
	case *ast.BinaryExpr:
		if _, cmp := negation[c.Op]; cmp || c.Op == token.LAND || c.Op == token.LOR {
			return
		}
	case *ast.UnaryExpr:
		if c.Op == token.NOT {
			return
		}
	case *ast.ParenExpr:
		return
	}
	add(opNegateCond, c, text(c), edit{off(c.Pos()), off(c.Pos()), "!("}, edit{off(c.End()), off(c.End()), ")"})
}

// droppable reports whether leaving st out is a "dropped write": an
// assignment (not a declaration), ++/--, or a call made for its effect.
// Locking and waiting calls are kept: without them the mutant deadlocks or
// races, which says nothing about the lock logic the suite checks.
func droppable(st ast.Stmt) bool {
	switch st := st.(type) {
	case *ast.AssignStmt:
		return st.Tok != token.DEFINE
	case *ast.IncDecStmt:
		return true
	case *ast.ExprStmt:
		call, ok := st.X.(*ast.CallExpr)
		if !ok {
			return false
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
			switch sel.Sel.Name {
			case "Lock", "Unlock", "RLock", "RUnlock", "Wait", "Add", "Done":
				return false
			}
		}
		if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "panic" {
			return false
		}
		return true
	}
	return false
}

// isStringy guesses that a + joins strings (a literal or a call of
// fmt.Sprint* on either side): such a mutant would not build.
func isStringy(b *ast.BinaryExpr) bool {
	for _, e := range []ast.Expr{b.X, b.Y} {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			return true
		}
	}
	return false
}

func recvType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvType(t.X)
	case *ast.IndexExpr:
		return recvType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// shift moves edits made at file offsets to offsets into the node's text
// starting at base (to show the mutated code in the report).
func shift(edits []edit, base int) []edit {
	out := make([]edit, len(edits))
	for i, e := range edits {
		out[i] = edit{e.off - base, e.end - base, e.text}
	}
	return out
}

// oneLine collapses white space, for the report.
func oneLine(s string) string {
	var b bytes.Buffer
	for i, f := range strings.Fields(s) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f)
	}
	return b.String()
}
