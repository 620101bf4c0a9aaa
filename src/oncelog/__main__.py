from oncelog.cli.main import app

app()
