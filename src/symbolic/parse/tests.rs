//! Grammar tests of the parser; errors and structure are tested in
//! `lexer`, `print` and `equality`.

use super::*;

fn parse(src: &str) -> IndexFn {
    let decl = |name: &str, shape: &[usize]| ArgDecl {
        name: name.to_string(),
        shape: shape.to_vec(),
    };
    let args = vec![decl("x", &[5]), decl("y", &[5, 5]), decl("d", &[8])];
    parse_fn(src, args).unwrap_or_else(|e| panic!("{src}: {e}"))
}

fn root(f: &IndexFn) -> &Node {
    f.graph.node(f.root)
}

#[test]
fn precedence_and_associativity() {
    let f = parse("f[i] = exp x[i] ** 2");
    let Node::Binary(BinaryOp::Pow, a, _) = root(&f) else {
        panic!("{:?}", root(&f))
    };
    assert!(matches!(f.graph.node(*a), Node::Unary(UnaryOp::Exp, _)));
    let f = parse("f[i] = -x[i] ** 2");
    let Node::Unary(UnaryOp::Neg, a) = root(&f) else {
        panic!("{:?}", root(&f))
    };
    assert!(matches!(f.graph.node(*a), Node::Binary(BinaryOp::Pow, ..)));
    assert_eq!(root(&parse("f[] = 2 ** 3 ** 2")).as_const(), Some(512.0));
    assert_eq!(
        root(&parse("f[] = 2 ** -1 - 8 / 4 / 2 - -3")).as_const(),
        Some(2.5)
    );
    assert_eq!(
        root(&parse("f[] = 2 * -3 + 1e1 + 1.5E+1 - 2e-1 * 5")).as_const(),
        Some(18.0)
    );
    let f = parse("f[i] = exp (-x[i]) * d[i] - x[i]");
    assert!(matches!(root(&f), Node::Binary(BinaryOp::Sub, ..)));
    assert!(parse_fn("f[i] = exp -x[i]", vec![]).is_err());
}

#[test]
fn spec_examples() {
    assert!(matches!(
        root(&parse("f[i;j] = y[i;j]**2")),
        Node::Binary(BinaryOp::Pow, ..)
    ));
    assert!(matches!(
        root(&parse("g[i] = sum{k}_0^(i) (x[k])")),
        Node::Reduce { .. }
    ));
}
