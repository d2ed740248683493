package mysqltest

// TypesTable is a table t with a column of every MySQL/MariaDB type the mysql source maps, and TypesRows its
// edge values (signed and unsigned extremes, DECIMAL(65,30), BIT, dates at both ends, TIME beyond 24h, utf8mb4
// with emoji, empty strings and binaries, ENUM/SET, JSON) and a row of NULLs. The source's tests copy it by
// snapshot and by binary log, and read it through their own result-set reader.
const TypesTable = `CREATE TABLE t (id int PRIMARY KEY,
	ti tinyint, tiu tinyint unsigned, si smallint, siu smallint unsigned, mi mediumint, miu mediumint unsigned,
	i int, iu int unsigned, bi bigint, biu bigint unsigned,
	d decimal(65,30), d2 decimal(10,2), f float, db double, bt bit(12), b1 bit(1),
	dt date, dtm datetime(6), ts timestamp(6) NULL, tm time(6), tm0 time, yr year,
	s varchar(50), tx text, ch char(5), bn binary(4), vb varbinary(10), bl blob,
	e enum('a','b''q','ü'), st set('x','y','z'), j json)`

// TypesRows are TypesTable's rows: ids 1 to 3, the third all NULL.
const TypesRows = `INSERT INTO t VALUES
	(1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, -9223372036854775808, 18446744073709551615,
	 '-12345678901234567890123456789012345.123456789012345678901234567890', 12345678.99, 3.1415927, 1.7976931348623157e308,
	 b'101010101010', b'1', '1000-01-01', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', '838:59:59.000000',
	 '-838:59:59', 1901, '😀 héllo wörld', 'héllo 😀', 'ab', X'00010200', X'ff00', X'deadbeef00',
	 'b''q', 'x,z', '{"a": [1, 2.5, "😀"], "b": null}'),
	(2, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 9223372036854775808,
	 '0.000000000000000000000000000001', -0.01, -1.17549435e-38, 5e-324,
	 b'0', b'0', '9999-12-31', '1000-01-01 00:00:00.000001', '1970-01-01 00:00:01.000000', '-00:00:00.500000',
	 '00:00:00', 2155, '', '', '', X'', X'', X'',
	 'ü', '', '[]'),
	(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`
