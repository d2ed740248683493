// Package civil converts between proleptic Gregorian dates and days since 1970-01-01 (Arrow's date32 and the
// day part of its timestamps), for sources that read dates from their own wire forms without time.Time, which
// stops at year 0 and costs a call per value. Years are astronomical: 1 BC is 0, 2 BC is -1. The algorithms are
// H. Hinnant's (http://howardhinnant.github.io/date_algorithms.html).
package civil

// Days counts days from 1970-01-01 to y-m-d. A day past the month's end carries into the next month, as
// time.Date's does.
func Days(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era = (y - 399) / 400
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// Date is the inverse of Days.
func Date(days int64) (y, m, d int64) {
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era = (z - 146096) / 146097
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}
