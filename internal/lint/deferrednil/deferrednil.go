package deferrednil

import (
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
)

// Analyzer reports returns that set a named func or interface result to nil when a
// deferred closure of the same function calls that result (or a method of it) without
// first checking it against nil. A deferred closure runs after the return statement
// has assigned the results, so it sees the nil and panics.
var Analyzer = &analysis.Analyzer{
	Name:     "deferrednil",
	Doc:      "report named func/interface results returned as nil and then called by a deferred closure",
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      run,
}

func run(pass *analysis.Pass) (any, error) {
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	ins.Preorder([]ast.Node{(*ast.FuncDecl)(nil), (*ast.FuncLit)(nil)}, func(n ast.Node) {
		var typ *ast.FuncType
		var body *ast.BlockStmt
		switch fn := n.(type) {
		case *ast.FuncDecl:
			typ, body = fn.Type, fn.Body
		case *ast.FuncLit:
			typ, body = fn.Type, fn.Body
		}
		if body == nil || typ.Results == nil {
			return
		}
		checkFunc(pass, typ, body)
	})
	return nil, nil
}

// named is one named result that may hold nil and be called.
type named struct {
	obj   types.Object
	index int // position among the results
}

func checkFunc(pass *analysis.Pass, typ *ast.FuncType, body *ast.BlockStmt) {
	var results []named
	index := 0
	for _, field := range typ.Results.List {
		if len(field.Names) == 0 {
			index++
			continue
		}
		for _, name := range field.Names {
			obj := pass.TypesInfo.Defs[name]
			if obj != nil && callable(obj.Type()) {
				results = append(results, named{obj: obj, index: index})
			}
			index++
		}
	}
	if len(results) == 0 {
		return
	}
	// Deferred closures of this function (not of closures nested in it) that call a
	// named result unguarded: where the call is, and where the first such defer is (a
	// return before it runs no defer).
	called := map[types.Object]token.Pos{}
	deferred := map[types.Object]token.Pos{}
	walkOwn(body, func(n ast.Node) {
		d, ok := n.(*ast.DeferStmt)
		if !ok {
			return
		}
		lit, ok := d.Call.Fun.(*ast.FuncLit)
		if !ok {
			return
		}
		for _, r := range results {
			if pos := unguardedCall(pass, lit.Body, r.obj); pos.IsValid() {
				if _, seen := called[r.obj]; !seen {
					called[r.obj], deferred[r.obj] = pos, d.Pos()
				}
			}
		}
	})
	if len(called) == 0 {
		return
	}
	walkOwn(body, func(n ast.Node) {
		ret, ok := n.(*ast.ReturnStmt)
		if !ok || len(ret.Results) != index {
			return // a bare return keeps the results as they are
		}
		for _, r := range results {
			pos, ok := called[r.obj]
			if !ok || ret.Pos() < deferred[r.obj] || !isNil(pass, ret.Results[r.index]) {
				continue
			}
			pass.Reportf(ret.Results[r.index].Pos(),
				"this return sets result %s to nil, and the deferred closure calls it at %s: it will panic",
				r.obj.Name(), pass.Fset.Position(pos))
		}
	})
}

// callable: a value of the type can be nil and be called (a func) or have a method
// called on it (an interface).
func callable(t types.Type) bool {
	switch t.Underlying().(type) {
	case *types.Signature, *types.Interface:
		return true
	}
	return false
}

// walkOwn visits the nodes of body that belong to its function: nested function
// literals are skipped, except that a deferred one is handed to visit whole.
func walkOwn(body *ast.BlockStmt, visit func(ast.Node)) {
	ast.Inspect(body, func(n ast.Node) bool {
		if n == nil {
			return false
		}
		if _, ok := n.(*ast.FuncLit); ok {
			return false
		}
		visit(n)
		return true
	})
}

// unguardedCall is where body calls obj (obj(...) or obj.M(...)), if it does so and
// nowhere compares obj with nil; token.NoPos otherwise.
func unguardedCall(pass *analysis.Pass, body *ast.BlockStmt, obj types.Object) token.Pos {
	var call token.Pos
	guarded := false
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			fun := ast.Unparen(n.Fun)
			if sel, ok := fun.(*ast.SelectorExpr); ok {
				fun = sel.X
			}
			if id, ok := fun.(*ast.Ident); ok && pass.TypesInfo.Uses[id] == obj && !call.IsValid() {
				call = n.Pos()
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (refersTo(pass, n.X, obj) && isNil(pass, n.Y) || refersTo(pass, n.Y, obj) && isNil(pass, n.X)) {
				guarded = true
			}
		}
		return true
	})
	if guarded {
		return token.NoPos
	}
	return call
}

func refersTo(pass *analysis.Pass, e ast.Expr, obj types.Object) bool {
	id, ok := ast.Unparen(e).(*ast.Ident)
	return ok && pass.TypesInfo.Uses[id] == obj
}

func isNil(pass *analysis.Pass, e ast.Expr) bool {
	id, ok := ast.Unparen(e).(*ast.Ident)
	if !ok {
		return false
	}
	_, isNil := pass.TypesInfo.Uses[id].(*types.Nil)
	return isNil
}
