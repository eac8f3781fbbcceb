from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('models_registry', '0011_media_tasks'),
    ]

    operations = [
        migrations.AddField(
            model_name='registeredmodel',
            name='keep_loaded',
            field=models.BooleanField(default=False, help_text='Pin the model: workers load it at start and never unload it to make room for others.'),
        ),
    ]
