package snowflaketest

import (
	"fmt"
	"regexp"
	"strings"
)

// The allow-list: the statement shapes the skippr Snowflake destination may emit, each written down from the
// grammar on Snowflake's documentation page named in its rule. The stand-in refuses any other statement, and
// the plugin's golden tests check each statement it builds against these rules, so a stand-in that would accept
// too much cannot hide a statement the real service rejects. A rule is deliberately narrower than Snowflake's
// grammar (the plugin's own spelling: quoted identifiers, single spaces, upper-case keywords): widening one is
// a decision to check against the page it cites.

const (
	// Identifiers: "Double-quoted identifiers … a double quote inside is written as two" (docs.snowflake.com
	// /en/sql-reference/identifiers-syntax).
	ident = `"(?:[^"]|"")+"`
	// Object names: database.schema.object (…/sql-reference/name-resolution).
	qname = ident + `\.` + ident + `\.` + ident
	// Data types (…/sql-reference/intro-summary-data-types): NUMBER(p,s) with p 1..38 and s 0..p, VARCHAR,
	// FLOAT, BINARY, BOOLEAN, DATE, TIME(9), TIMESTAMP_NTZ(9), TIMESTAMP_TZ(9), VARIANT, OBJECT, ARRAY.
	typ = `(?:NUMBER\((?:[1-9]|[12][0-9]|3[0-8]),(?:[0-9]|[12][0-9]|3[0-7])\)|VARCHAR|FLOAT|BINARY|BOOLEAN|DATE|TIME\(9\)|TIMESTAMP_NTZ\(9\)|TIMESTAMP_TZ\(9\)|VARIANT|OBJECT|ARRAY)`
	// DEFAULT FALSE: the soft-delete flag's (sql-reference/sql/create-table and alter-table, "DEFAULT expr").
	coldef = ident + ` ` + typ + `(?: NOT NULL)?(?: DEFAULT FALSE)?`
	idents = ident + `(?:, ` + ident + `)*`
	// A table stage: "@[namespace.]%table_name[/path]" (…/sql-reference/sql/put, "internalStage").
	stage = `@` + ident + `\.` + ident + `\.%` + ident + `/skippr/`
	// A staged column as MERGE or INSERT takes it: itself, or JSON text parsed (…/functions/parse_json,
	// …/functions/to_object, …/functions/to_array).
	// A metadata column's value may also be the apply's time as a TIMESTAMP_TZ constant
	// (…/functions/cast; the string in a form AUTO detection reads, …/date-time-input-output).
	sval = `(?:s\.` + ident + `|PARSE_JSON\(s\.` + ident + `\)|TO_OBJECT\(PARSE_JSON\(s\.` + ident + `\)\)|TO_ARRAY\(PARSE_JSON\(s\.` + ident + `\)\)` +
		`|CAST\('[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6} \+00:00' AS TIMESTAMP_TZ\(9\)\))`
	svals  = sval + `(?:, ` + sval + `)*`
	sets   = ident + ` = ` + sval + `(?:, ` + ident + ` = ` + sval + `)*`
	stateS = `SELECT CAST\(\? AS VARCHAR\) AS "PIPELINE", CAST\(\? AS VARCHAR\) AS "STREAM", CAST\(\? AS NUMBER\(20,0\)\) AS "LAST_SEQUENCE"`
)

// Rule is one allowed statement shape.
type Rule struct {
	Name string
	Doc  string // the Snowflake documentation page the shape was written from
	re   *regexp.Regexp
}

func rule(name, doc, pattern string) Rule {
	return Rule{Name: name, Doc: doc, re: regexp.MustCompile(`^(?:` + pattern + `)$`)}
}

// Rules are the allowed shapes.
var Rules = []Rule{
	rule("transaction", "sql-reference/sql/begin (BEGIN TRANSACTION NAME name), sql/commit, sql/rollback",
		`BEGIN|BEGIN TRANSACTION NAME [A-Z][A-Z0-9_]*|COMMIT|ROLLBACK`),
	rule("transactions", "sql-reference/sql/show-transactions, functions/system_abort_transaction, functions/current_session",
		`SHOW TRANSACTIONS|SELECT SYSTEM\$ABORT_TRANSACTION\([0-9]+\)|SELECT CURRENT_SESSION\(\)`),
	rule("ping", "gosnowflake's Ping", `SELECT 1`),
	rule("current role", "sql-reference/functions/current_role", `SELECT CURRENT_ROLE\(\)`),
	rule("use", "sql-reference/sql/use-warehouse, use-database, use-schema",
		`USE WAREHOUSE `+ident+`|USE DATABASE `+ident+`|USE SCHEMA `+ident+`\.`+ident),
	rule("create table", "sql-reference/sql/create-table (IF NOT EXISTS; outOfLineConstraint PRIMARY KEY)",
		`CREATE TABLE IF NOT EXISTS `+qname+` \(`+coldef+`(?:, `+coldef+`)*(?:, PRIMARY KEY \(`+idents+`\))?\)`),
	rule("create staging table", "sql-reference/sql/create-table (OR REPLACE, TEMPORARY)",
		`CREATE OR REPLACE TEMPORARY TABLE `+qname+` \(`+coldef+`(?:, `+coldef+`)*\)`),
	rule("add column", "sql-reference/sql/alter-table-column (ADD COLUMN col_name col_type)",
		`ALTER TABLE `+qname+` ADD COLUMN `+coldef),
	rule("rename column", "sql-reference/sql/alter-table (RENAME COLUMN col_name TO new_col_name)",
		`ALTER TABLE `+qname+` RENAME COLUMN `+ident+` TO `+ident),
	rule("rename table", "sql-reference/sql/alter-table (RENAME TO new_table_name)",
		`ALTER TABLE `+qname+` RENAME TO `+qname),
	rule("widen number", "sql-reference/sql/alter-table-column (ALTER COLUMN … SET DATA TYPE; precision only)",
		`ALTER TABLE `+qname+` ALTER COLUMN `+ident+` SET DATA TYPE NUMBER\([0-9]+,[0-9]+\)`),
	rule("columns", "sql-reference/info-schema/columns",
		`SELECT "COLUMN_NAME", "DATA_TYPE", "NUMERIC_PRECISION", "NUMERIC_SCALE" FROM `+ident+`\."INFORMATION_SCHEMA"\."COLUMNS" WHERE "TABLE_SCHEMA" = \? AND "TABLE_NAME" = \? ORDER BY "ORDINAL_POSITION"`),
	rule("read state", "sql-reference/sql/select",
		`SELECT "STREAM", "LAST_SEQUENCE" FROM `+qname+` WHERE "PIPELINE" = \?`),
	rule("put", "sql-reference/sql/put (AUTO_COMPRESS, SOURCE_COMPRESSION = NONE, OVERWRITE)",
		`PUT 'file://[^'\\]+' `+stage+` AUTO_COMPRESS = FALSE SOURCE_COMPRESSION = NONE OVERWRITE = TRUE`),
	rule("remove", "sql-reference/sql/remove", `REMOVE `+stage+`[A-Za-z0-9_.-]+`),
	rule("copy", "sql-reference/sql/copy-into-table (FILES, FILE_FORMAT TYPE = PARQUET, MATCH_BY_COLUMN_NAME, FORCE, PURGE); the Parquet options USE_LOGICAL_TYPE and BINARY_AS_TEXT: sql-reference/sql/create-file-format",
		`COPY INTO `+qname+` FROM `+stage+` FILES = \('[A-Za-z0-9_.-]+'\) FILE_FORMAT = \(TYPE = PARQUET(?: USE_LOGICAL_TYPE = (?:TRUE|FALSE))?(?: BINARY_AS_TEXT = (?:TRUE|FALSE))?\) MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE FORCE = TRUE PURGE = TRUE`),
	rule("merge", "sql-reference/sql/merge (matchedClause with AND case_predicate, DELETE, UPDATE SET; notMatchedClause INSERT)",
		`MERGE INTO `+qname+` AS t USING `+qname+` AS s ON t\.`+ident+` = s\.`+ident+`(?: AND t\.`+ident+` = s\.`+ident+`)*`+
			` WHEN MATCHED AND s\."_SKIPPR_OP" = [0-9] THEN DELETE(?: WHEN MATCHED THEN UPDATE SET `+sets+`)?`+
			` WHEN NOT MATCHED AND s\."_SKIPPR_OP" <> [0-9] THEN INSERT \(`+idents+`\) VALUES \(`+svals+`\)`),
	rule("soft-delete merge", "sql-reference/sql/merge (matchedClause WHEN MATCHED AND case_predicate THEN UPDATE SET, twice: the first that matches applies; notMatchedClause WHEN NOT MATCHED AND case_predicate THEN INSERT); a BOOLEAN column is a predicate (sql-reference/operators-logical)",
		`MERGE INTO `+qname+` AS t USING `+qname+` AS s ON t\.`+ident+` = s\.`+ident+`(?: AND t\.`+ident+` = s\.`+ident+`)*`+
			` WHEN MATCHED AND s\."_SKIPPR_KEY_ONLY" THEN UPDATE SET `+sets+
			` WHEN MATCHED THEN UPDATE SET `+sets+
			` WHEN NOT MATCHED AND NOT s\."_SKIPPR_KEY_ONLY" THEN INSERT \(`+idents+`\) VALUES \(`+svals+`\)`),
	rule("append", "sql-reference/sql/insert (INSERT INTO … (cols) SELECT)",
		`INSERT INTO `+qname+` \(`+idents+`\) SELECT `+svals+` FROM `+qname+` AS s`),
	rule("state", "sql-reference/sql/merge (source a subquery of SELECT … UNION ALL; matchedClause WHEN MATCHED AND case_predicate; CAST: sql-reference/functions/cast)",
		`MERGE INTO `+qname+` AS t USING \(`+stateS+`(?: UNION ALL `+stateS+`)*\) AS s ON t\."PIPELINE" = s\."PIPELINE" AND t\."STREAM" = s\."STREAM"`+
			` WHEN MATCHED AND \(s\."STREAM" <> '' OR t\."LAST_SEQUENCE" = CAST\(\? AS NUMBER\(20,0\)\)\) THEN UPDATE SET "LAST_SEQUENCE" = s\."LAST_SEQUENCE"`+
			` WHEN NOT MATCHED THEN INSERT \("PIPELINE", "STREAM", "LAST_SEQUENCE"\) VALUES \(s\."PIPELINE", s\."STREAM", s\."LAST_SEQUENCE"\)`),
	rule("truncate", "sql-reference/sql/delete", `DELETE FROM `+qname),
	rule("drop state", "sql-reference/sql/delete (WHERE condition)",
		`DELETE FROM `+qname+` WHERE "PIPELINE" = \? AND "STREAM" = \?`),
	rule("read fills", "sql-reference/sql/select",
		`SELECT "TABLE_NAME", "COLUMN_NAME", "VALUE" FROM `+qname+` WHERE "PIPELINE" = \?`),
	rule("record fill", "sql-reference/sql/insert (INSERT INTO … (cols) VALUES)",
		`INSERT INTO `+qname+` \("PIPELINE", "TABLE_NAME", "COLUMN_NAME", "VALUE"\) VALUES \(\?, \?, \?, \?\)`),
	rule("drop fill", "sql-reference/sql/delete (WHERE condition)",
		`DELETE FROM `+qname+` WHERE "PIPELINE" = \? AND "TABLE_NAME" = \? AND "COLUMN_NAME" = \?`),
	rule("try cast", "sql-reference/functions/try_cast (a string expression; NULL where CAST fails)",
		`SELECT TRY_CAST\(\? AS `+typ+`\) IS NOT NULL`),
	rule("fill", "sql-reference/sql/update (UPDATE … SET col = expr WHERE condition); functions/cast",
		`UPDATE `+qname+` SET `+ident+` = CAST\(\? AS `+typ+`\) WHERE `+ident+` IS NULL`),
}

// Allowed returns the rule a statement matches, or an error saying it is outside the allow-list.
func Allowed(stmt string) (Rule, error) {
	for _, r := range Rules {
		if r.re.MatchString(stmt) {
			return r, nil
		}
	}
	short := stmt
	if len(short) > 300 {
		short = short[:300] + "…"
	}
	return Rule{}, fmt.Errorf("statement outside the documented Snowflake syntax the stand-in allows: %s", strings.TrimSpace(short))
}
