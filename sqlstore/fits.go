package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// fits checks that the Store's table is one the Store can trust: that it
// has the Store's columns, of types that compare tokens as numbers and
// names byte for byte, fence NOT NULL, and a unique index on resource
// for the ON CONFLICT (resource) of Put and Tx (in MySQL, the ON
// DUPLICATE KEY UPDATE). It selects the columns; reads their types in
// the catalog (fitsPostgres, fitsSQLite; fitsMySQL in mysql.go); then,
// except in MySQL, where that plan would not tell, has the database plan
// the put statement with EXPLAIN, which fails when no unique index
// matches (SQLite: "ON CONFLICT clause does not match any PRIMARY KEY or
// UNIQUE constraint"; PostgreSQL: "there is no unique or exclusion
// constraint matching the ON CONFLICT specification") and writes nothing.
//
// The CHECK constraints of the table New creates (tokens above zero, the
// value's token not above the fence) are not required: the Store never
// writes a row they would refuse, and they guard the table only against
// other writers.
func (s *Store) fits(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, s.q.probe)
	if err == nil {
		err = rows.Close()
	}
	if err != nil {
		if ctx.Err() != nil || connectionTrouble(err) {
			return s.checkErr(ctx, err)
		}
		return fmt.Errorf("sqlstore: table %s does not have the columns resource, fence, value, value_token: %w", s.table, err)
	}
	switch s.dialect {
	case MySQL:
		return s.fitsMySQL(ctx)
	case Postgres:
		err = s.fitsPostgres(ctx)
	case SQLite:
		err = s.fitsSQLite(ctx)
	}
	if err != nil {
		return err
	}
	rows, err = s.db.QueryContext(ctx, "EXPLAIN "+s.q.put, s.q.putArgs("", 1, []byte{})...)
	if err == nil {
		err = rows.Close()
	}
	if err != nil {
		if ctx.Err() != nil || connectionTrouble(err) {
			return s.checkErr(ctx, err)
		}
		return fmt.Errorf("sqlstore: table %s: planning the Put statement, whose ON CONFLICT (resource) needs a primary key or unique constraint on resource: %w", s.table, err)
	}
	return nil
}

// checkErr is the error of a query of fits that failed with err.
func (s *Store) checkErr(ctx context.Context, err error) error {
	return dbErr(ctx, "new", "", "checking table "+s.table+": ", err)
}

// column is what the checks of New read of one of the Store's columns.
type column struct {
	typ        string // as the catalog shows it: "bigint", "TEXT", "" for none
	notNull    bool
	hasDefault bool // a default other than NULL
	made       bool // generated from other columns, or SQLite's rowid (an INTEGER PRIMARY KEY)
}

// columnNames are the Store's columns.
var columnNames = [...]string{"resource", "fence", "value", "value_token"}

// made is the error for a column whose values the database makes.
func (s *Store) made(name, how string) error {
	return fmt.Errorf("sqlstore: table %s: column %s is %s; the Store needs to write its values itself", s.table, name, how)
}

// unfit is the error for a column whose type the Store cannot trust.
func (s *Store) unfit(name, shown, want string) error {
	return fmt.Errorf("sqlstore: table %s: column %s is %s; the Store needs %s", s.table, name, shown, want)
}

// nullable is the error for a fence column without NOT NULL.
func (s *Store) nullable(name string) error {
	return fmt.Errorf("sqlstore: table %s: column %s may be NULL; the Store needs it NOT NULL, as every row has a fence", s.table, name)
}

// valueless checks the columns of a value, which a row that Fence or Tx
// makes has not yet: value and value_token must take NULL there, and
// value_token must have no default, which would make the row's missing
// value look written (a token of 0, not a token, or a made-up one).
func (s *Store) valueless(value, valueToken column) error {
	for _, c := range []struct {
		name string
		column
	}{{"value", value}, {"value_token", valueToken}} {
		if c.notNull {
			return fmt.Errorf("sqlstore: table %s: column %s is NOT NULL; the Store needs it to take NULL, as a row that Fence or Tx makes has no value yet", s.table, c.name)
		}
	}
	if valueToken.hasDefault {
		return fmt.Errorf("sqlstore: table %s: column value_token has a default; the Store needs none, as a row that Fence or Tx makes has no value, and so no value token, yet", s.table)
	}
	return nil
}

// The PostgreSQL types the Store needs, by their OIDs, which are fixed
// for the built-in types.
const (
	pgBytea   = 17
	pgBigint  = 20
	pgText    = 25
	pgVarchar = 1043
)

// fitsPostgres checks the columns' types in pg_attribute: resource text,
// or varchar of at least MaxResourceLen characters (char pads names and
// ignores trailing spaces, bytea is no name); fence and value_token
// bigint, which compare as numbers (text compares "10" below "9");
// value bytea; fence NOT NULL. It refuses a nondeterministic collation
// on resource, or on a unique index of resource alone, which can take
// distinct names for one ("A" and "a"). A domain is refused as any type
// other than those. The table's name resolves as in the Store's
// statements: in its schema, or along the search_path.
func (s *Store) fitsPostgres(ctx context.Context) error {
	// to_jsonb(c) ->> 'collisdeterministic' is NULL before PostgreSQL
	// 12, whose collations are all deterministic.
	// to_jsonb(a) ->> 'attgenerated' is NULL before PostgreSQL 12, which
	// has no generated columns, and '' for a column not generated.
	rows, err := s.db.QueryContext(ctx, `SELECT a.attname, a.atttypid::bigint, a.atttypmod, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.atthasdef,
	COALESCE(to_jsonb(a) ->> 'attgenerated', '') <> '',
	COALESCE((to_jsonb(c) ->> 'collisdeterministic')::boolean, true)
FROM pg_attribute a LEFT JOIN pg_collation c ON c.oid = a.attcollation
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
	AND a.attname IN ('resource', 'fence', 'value', 'value_token')`, quoteTable(Postgres, s.table))
	if err != nil {
		return s.checkErr(ctx, err)
	}
	type pgColumn struct {
		column
		oid, mod      int64
		deterministic bool
	}
	cols := make(map[string]pgColumn)
	for rows.Next() {
		var name string
		var c pgColumn
		if err := rows.Scan(&name, &c.oid, &c.mod, &c.typ, &c.notNull, &c.hasDefault, &c.made, &c.deterministic); err != nil {
			rows.Close()
			return s.checkErr(ctx, err)
		}
		cols[name] = c
	}
	if err := rows.Err(); err != nil {
		return s.checkErr(ctx, err)
	}
	for _, name := range columnNames {
		if cols[name].made {
			return s.made(name, "a generated column")
		}
	}
	const why = ": tokens must compare as numbers"
	for _, name := range []string{"fence", "value_token"} {
		if c := cols[name]; c.oid != pgBigint {
			return s.unfit(name, c.typ, "bigint"+why)
		}
	}
	if c := cols["value"]; c.oid != pgBytea {
		return s.unfit("value", c.typ, "bytea: values are bytes")
	}
	r := cols["resource"]
	// A varchar's atttypmod is its length + 4; -1 for none.
	if r.oid != pgText && !(r.oid == pgVarchar && (r.mod < 0 || r.mod-4 >= MaxResourceLen)) {
		return s.unfit("resource", r.typ, fmt.Sprintf("text, or varchar of at least %d characters: names are compared whole, byte for byte", MaxResourceLen))
	}
	if !r.deterministic {
		return fmt.Errorf("sqlstore: table %s: column resource has a nondeterministic collation, which takes distinct names for one; the Store needs a deterministic one, such as the default", s.table)
	}
	if !cols["fence"].notNull {
		return s.nullable("fence")
	}
	if err := s.valueless(cols["value"].column, cols["value_token"].column); err != nil {
		return err
	}
	var loose int
	err = s.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_index i
	JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
	JOIN pg_collation c ON c.oid = i.indcollation[0]
WHERE i.indrelid = $1::regclass AND i.indisunique AND a.attname = 'resource'
	AND NOT COALESCE((to_jsonb(c) ->> 'collisdeterministic')::boolean, true)`, quoteTable(Postgres, s.table)).Scan(&loose)
	if err != nil {
		return s.checkErr(ctx, err)
	}
	if loose > 0 {
		return fmt.Errorf("sqlstore: table %s: a unique index on resource has a nondeterministic collation, which takes distinct names for one; the Store needs a deterministic one, such as the default", s.table)
	}
	return nil
}

// SQLite's type affinities, which decide how a column stores and
// compares what it is given.
const (
	affinityInteger = "INTEGER"
	affinityText    = "TEXT"
	affinityBlob    = "BLOB"
	affinityReal    = "REAL"
	affinityNumeric = "NUMERIC"
)

// sqliteAffinity returns the affinity of a column of declared type typ,
// by SQLite's rules, in their order: a type holding "INT" has INTEGER
// affinity; "CHAR", "CLOB" or "TEXT", TEXT; "BLOB" or no type, BLOB;
// "REAL", "FLOA" or "DOUB", REAL; any other, NUMERIC (ANY among them,
// outside STRICT tables; in a STRICT table ANY takes values as given,
// which the Store refuses as well).
func sqliteAffinity(typ string) string {
	t := strings.ToUpper(typ)
	has := func(subs ...string) bool {
		for _, sub := range subs {
			if strings.Contains(t, sub) {
				return true
			}
		}
		return false
	}
	switch {
	case has("INT"):
		return affinityInteger
	case has("CHAR", "CLOB", "TEXT"):
		return affinityText
	case t == "" || has("BLOB"):
		return affinityBlob
	case has("REAL", "FLOA", "DOUB"):
		return affinityReal
	}
	return affinityNumeric
}

// fitsSQLite checks the columns' declared types in pragma_table_info, by
// their affinity: INTEGER for fence and value_token, which then store the
// tokens as integers and compare them as numbers (a TEXT column stores
// "10" and "9" as text, and "10" < "9"; one of no declared type, BLOB
// affinity, stores what it is given, which the Store cannot trust); TEXT
// for resource; BLOB for value; and fence NOT NULL. It refuses a
// collation other than BINARY on resource, or on a unique index of
// resource alone, which would take distinct names for one (NOCASE: "A"
// and "a"; RTRIM: "a" and "a "). A STRICT table with INTEGER, TEXT and
// BLOB columns fits like any other.
func (s *Store) fitsSQLite(ctx context.Context) error {
	schema, table, ok := strings.Cut(s.table, ".")
	if !ok {
		// Resolved as the statements resolve it: temp, main, then the
		// attached databases.
		schema, table = "", s.table
	}
	// The pragma functions take the schema as their last argument, or
	// search every database without it.
	args := []any{table}
	schemaArg := ""
	if schema != "" {
		args, schemaArg = append(args, schema), ", ?2"
	}
	// table_xinfo, unlike table_info, shows generated columns (hidden 2
	// or 3). A column other than resource in the primary key may be the
	// rowid (an INTEGER PRIMARY KEY), which SQLite fills in itself.
	rows, err := s.db.QueryContext(ctx, `SELECT name, type, "notnull", dflt_value IS NOT NULL AND upper(dflt_value) <> 'NULL',
	hidden <> 0 OR (pk > 0 AND lower(name) <> 'resource') FROM pragma_table_xinfo(?1`+schemaArg+`)
WHERE name IN ('resource', 'fence', 'value', 'value_token')`, args...)
	if err != nil {
		return s.checkErr(ctx, err)
	}
	cols := make(map[string]column)
	for rows.Next() {
		var name string
		var c column
		if err := rows.Scan(&name, &c.typ, &c.notNull, &c.hasDefault, &c.made); err != nil {
			rows.Close()
			return s.checkErr(ctx, err)
		}
		cols[strings.ToLower(name)] = c
	}
	if err := rows.Err(); err != nil {
		return s.checkErr(ctx, err)
	}
	for _, name := range columnNames {
		if cols[name].made {
			return s.made(name, "a generated column, or in the primary key, where an INTEGER PRIMARY KEY is the rowid")
		}
	}
	shown := func(c column) string {
		if c.typ == "" {
			return "of no declared type (BLOB affinity)"
		}
		return fmt.Sprintf("%s (%s affinity)", c.typ, sqliteAffinity(c.typ))
	}
	for _, name := range []string{"fence", "value_token"} {
		if c := cols[name]; sqliteAffinity(c.typ) != affinityInteger {
			return s.unfit(name, shown(c), "INTEGER affinity, a declared type holding INT such as BIGINT or INTEGER: tokens must be stored as integers and compare as numbers")
		}
	}
	if c := cols["resource"]; sqliteAffinity(c.typ) != affinityText {
		return s.unfit("resource", shown(c), "TEXT affinity, e.g. TEXT: names are stored as given and compared as text")
	}
	if c := cols["value"]; sqliteAffinity(c.typ) != affinityBlob {
		return s.unfit("value", shown(c), "BLOB affinity, e.g. BLOB: values are bytes")
	}
	if !cols["fence"].notNull {
		return s.nullable("fence")
	}
	if err := s.valueless(cols["value"], cols["value_token"]); err != nil {
		return err
	}

	// The collation of resource, told by how it compares: a UNION takes
	// the collation of its first SELECT's column, and keeps the three
	// names apart only under BINARY (among SQLite's own collations).
	var distinct int
	err = s.db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT resource FROM `+quoteTable(SQLite, s.table)+` WHERE 0
	UNION SELECT 'a' UNION SELECT 'A' UNION SELECT 'a ')`).Scan(&distinct)
	if err != nil {
		return s.checkErr(ctx, err)
	}
	if distinct != 3 {
		return fmt.Errorf("sqlstore: table %s: column resource has a collation other than BINARY, which takes distinct names for one (of \"a\", \"A\" and \"a \" it keeps %d); the Store needs BINARY, the default", s.table, distinct)
	}
	// The unique indexes of resource alone, and their collations.
	rows, err = s.db.QueryContext(ctx, `SELECT il.name, ix.name, ix.coll FROM pragma_index_list(?1`+schemaArg+`) AS il,
	pragma_index_xinfo(il.name`+schemaArg+`) AS ix
WHERE il."unique" AND ix.key`, args...)
	if err != nil {
		return s.checkErr(ctx, err)
	}
	type index struct {
		columns int
		loose   bool // on resource, with a collation other than BINARY
	}
	indexes := make(map[string]*index)
	for rows.Next() {
		var name string
		var col, coll sql.NullString // NULL for an expression
		if err := rows.Scan(&name, &col, &coll); err != nil {
			rows.Close()
			return s.checkErr(ctx, err)
		}
		ix := indexes[name]
		if ix == nil {
			ix = &index{}
			indexes[name] = ix
		}
		ix.columns++
		if strings.EqualFold(col.String, "resource") && !strings.EqualFold(coll.String, "BINARY") {
			ix.loose = true
		}
	}
	if err := rows.Err(); err != nil {
		return s.checkErr(ctx, err)
	}
	for name, ix := range indexes {
		if ix.columns == 1 && ix.loose {
			return fmt.Errorf("sqlstore: table %s: the unique index %s on resource has a collation other than BINARY, which takes distinct names for one; the Store needs BINARY, the default", s.table, name)
		}
	}
	return nil
}
