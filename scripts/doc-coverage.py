#!/usr/bin/env python3
"""Fails when a public symbol of a module has no documentation comment.

Reads the documentation-coverage.json that `docc convert --experimental-documentation-coverage` writes. Members
that come from standard protocols (Hashable, Comparable, OptionSet, literals, Codable,
SerialExecutor) are not ours to document.
"""
import json
import sys

INHERITED = {
    'hash(into:)', 'hashValue', '==(_:_:)', '!=(_:_:)', 'description', 'debugDescription', 'init(from:)',
    'encode(to:)', 'rawValue', 'init(rawValue:)', '<(_:_:)', '>(_:_:)', '<=(_:_:)', '>=(_:_:)',
    'init(stringInterpolation:)', 'init(unicodeScalarLiteral:)', 'init(extendedGraphemeClusterLiteral:)',
    'allCases', 'localizedDescription', '...(_:)', '...(_:_:)', '..<(_:)', '..<(_:_:)',
    # SerialExecutor's default members.
    'assertIsolated(_:file:line:)', 'isIsolatingCurrentContext()', 'isMainExecutor',
    'isSameExclusiveExecutionContext(other:)', 'preconditionIsolated(_:file:line:)',
}
OPTION_SET = {
    'contains(_:)', 'formIntersection(_:)', 'formSymmetricDifference(_:)', 'formUnion(_:)', 'init()', 'insert(_:)',
    'remove(_:)', 'update(with:)', 'intersection(_:)', 'union(_:)', 'symmetricDifference(_:)', 'subtract(_:)',
    'subtracting(_:)', 'isSubset(of:)', 'isSuperset(of:)', 'isDisjoint(with:)', 'isStrictSubset(of:)',
    'isStrictSuperset(of:)', 'isEmpty', 'init(_:)', 'init(arrayLiteral:)',
}

module, report = sys.argv[1], sys.argv[2]
symbols = json.load(open(report))
missing = sorted({
    s['referencePath'].split('/documentation/')[1]
    for s in symbols
    if s['kind'].get('isSymbol') and not s['hasAbstract'] and s['title'] not in INHERITED
    and f'/documentation/{module}/' in s['referencePath']
    and not (('Options' in s['referencePath'] or 'Flags' in s['referencePath']) and s['title'] in OPTION_SET)
})
if missing:
    print(f'{module}: {len(missing)} public symbols without documentation:')
    for path in missing:
        print(f'  {path}')
    sys.exit(1)
print(f'{module}: every public symbol is documented ({len(symbols)} symbols)')
