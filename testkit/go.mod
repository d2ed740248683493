module github.com/skippr-dev/skippr/testkit

go 1.26.0
