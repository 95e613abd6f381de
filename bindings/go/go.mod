module github.com/octattn/octattn/bindings/go

go 1.21
